package testpg

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
)

// errOS is nil: servers run here.
var errOS error

// socketName is the server's socket in its folder (port 5432's name; no
// TCP port is opened).
const socketName = ".s.PGSQL.5432"

// start makes a folder, runs initdb into it and starts postgres on a
// socket in it; the returned Server's stop undoes all of it.
func start(bin string) (_ *Server, err error) {
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(baseDir(cred), "airlock-testpg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if n := len(filepath.Join(dir, socketName)); n > 100 {
		return nil, fmt.Errorf("the socket path in %s would be %d bytes, over the 107 a unix socket allows; set TMPDIR to a shorter folder", dir, n)
	}
	s := &Server{dir: dir, password: newPassword(), log: &testenv.Buffer{}}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "--pgdata", data, "--username", User, "--pwfile", pwfile,
		"--auth", "scram-sha-256", "--locale", "C", "--encoding", "UTF8", "--no-sync", "--no-instructions")
	initdb.Dir, initdb.Env = dir, cleanEnv()
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, trimLog(string(out)))
	}
	if err := os.Remove(pwfile); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "shared_buffers=32MB", "-c", "max_connections=200")
	cmd.Dir, cmd.Env = dir, cleanEnv()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Should the test binary die without stopping it, the server gets
	// SIGQUIT (an immediate shutdown) rather than living on. Pdeathsig
	// comes when the thread that started the child ends, so the starting
	// goroutine keeps its thread locked, and alive, until the server
	// exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	started := make(chan error, 1)
	exited := make(chan struct{})
	var waitErr error
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waitErr = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.pid = cmd.Process.Pid
	s.stop = func() error {
		err := stopServer(cmd, exited)
		if err == nil && waitErr != nil && !interrupted(cmd) {
			err = fmt.Errorf("postgres ended with %v", waitErr)
		}
		return errors.Join(err, os.RemoveAll(dir))
	}
	if err := s.waitReady(exited); err != nil {
		return nil, errors.Join(err, s.stop())
	}
	return s, nil
}

// stopServer stops postgres with SIGINT (a fast shutdown: sessions are
// ended, the postmaster waits for its children) and waits; one that will
// not stop gets SIGQUIT, then SIGKILL.
func stopServer(cmd *exec.Cmd, exited <-chan struct{}) error {
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, time.Minute}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}
	for i, st := range steps {
		select {
		case <-exited:
			return nil
		default:
		}
		_ = cmd.Process.Signal(st.sig)
		select {
		case <-exited:
			if i > 0 {
				return fmt.Errorf("postgres ignored SIGINT for %v; it stopped at %v", steps[0].wait, st.sig)
			}
			return nil
		case <-time.After(st.wait):
		}
	}
	return errors.New("postgres did not stop, even at SIGKILL")
}

// interrupted reports whether the server's exit is the one SIGINT asks
// for (status 0) or the signal itself.
func interrupted(cmd *exec.Cmd) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && (ws.ExitStatus() == 0 || ws.Signal() == syscall.SIGINT)
}

// serverUser is the user postgres runs as: nil (the test's own) unless
// the test runs as root, whom PostgreSQL refuses; then "postgres".
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: no postgres user to run it as (Debian's postgresql package makes one): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// baseDir is where the server's folder is made: the temporary folder,
// unless the server's user could not reach into it (a TMPDIR under
// root's home), then /tmp.
func baseDir(cred *syscall.Credential) string {
	base := os.TempDir()
	if cred == nil {
		return base
	}
	for d := base; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return base
		}
	}
}
