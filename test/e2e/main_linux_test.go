package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/internal/testenv"
)

// Keys of the two tenants of every test server.
const (
	keyA = "alice-key-0123456789abcdef"
	keyB = "bob-key-0123456789abcdefgh"
)

// bin is the airlock binary under test; buildErr says why there is none.
var (
	bin      string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "airlock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, buildErr = build(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds ./cmd/airlock into dir, or takes AIRLOCK_BIN.
func build(dir string) (string, error) {
	if b := os.Getenv("AIRLOCK_BIN"); b != "" {
		return b, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "airlock")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/airlock-sandbox/airlock/cmd/airlock")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/airlock: %v: %s", err, bytes.TrimSpace(b))
	}
	return out, nil
}

// need skips the test, or fails it under CI, when it cannot run here.
func need(t testing.TB) {
	t.Helper()
	testenv.Require(t, "root: airlock serve runs native sandboxes as root here", testenv.Root())
	testenv.Require(t, "the airlock binary (go build ./cmd/airlock, or AIRLOCK_BIN)", buildErr)
}

// server is one airlock serve process.
type server struct {
	t      testing.TB
	cmd    *exec.Cmd
	url    string
	pid    int
	tmp    string // its TMPDIR
	logf   string
	waited chan struct{}
	err    error // Wait's, once waited is closed
	once   sync.Once
}

// serverConfig says how to start a server.
type serverConfig struct {
	// keys are more lines for the keys file, beside alice's and bob's.
	keys []string
	// args are more flags.
	args []string
	// home is the AIRLOCK_HOME to serve images from (the audit log then
	// goes to the test's folder); "" is a fresh, empty one.
	home string
}

// startServer starts airlock serve on a free loopback port and waits
// until it answers. Cleanup stops it with SIGTERM and checks that it
// left nothing behind.
func startServer(t testing.TB, cfg serverConfig) *server {
	t.Helper()
	need(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	lines := append([]string{"alice " + keyA, "bob " + keyB}, cfg.keys...)
	if err := os.WriteFile(keys, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s *server
	for try := 0; ; try++ {
		var err error
		s, err = launch(t, dir, keys, cfg)
		if err == nil {
			break
		}
		if try == 2 {
			t.Fatal(err)
		}
		t.Logf("starting the server again: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(30 * time.Second); err != nil {
			t.Errorf("stopping the server: %v\n%s", err, s.logTail())
		}
		if left := leftovers(s.pid, s.tmp); len(left) > 0 {
			t.Errorf("the server left behind:\n  %s", strings.Join(left, "\n  "))
		}
	})
	return s
}

// freePort asks the kernel for a free loopback port.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func launch(t testing.TB, dir, keys string, cfg serverConfig) (*server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, "tmp-")
	if err != nil {
		return nil, err
	}
	logf := filepath.Join(tmp, "..", filepath.Base(tmp)+".log")
	log, err := os.Create(logf)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	args := append([]string{"serve", "--addr", addr, "--keys-file", keys}, cfg.args...)
	home := filepath.Join(dir, "home")
	if cfg.home != "" {
		home = cfg.home
		args = append(args, "--audit-db", filepath.Join(tmp, "..", filepath.Base(tmp)+".audit.db"))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "AIRLOCK_HOME="+home)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{t: t, cmd: cmd, url: "http://" + addr, pid: cmd.Process.Pid, tmp: tmp, logf: logf, waited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.waited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		select {
		case <-s.waited:
			return nil, fmt.Errorf("airlock serve exited: %v\n%s", s.err, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			_ = s.stop(5 * time.Second)
			return nil, fmt.Errorf("airlock serve did not answer on %s within 15s\n%s", addr, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit; a server that does not exit
// in time is killed. A stop after the server exited returns how it did.
func (s *server) stop(wait time.Duration) error {
	select {
	case <-s.waited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.waited:
		return s.err
	case <-time.After(wait):
		_ = s.cmd.Process.Kill()
		<-s.waited
		return fmt.Errorf("did not exit within %v of SIGTERM; killed", wait)
	}
}

// kill ends the server with SIGKILL and waits for it.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.waited
}

// logTail is the end of the server's log.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logf)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// log reads the server's whole log.
func (s *server) log() string {
	b, _ := os.ReadFile(s.logf)
	return string(b)
}

// client is an SDK client of the server with a key.
func (s *server) client(t testing.TB, key string, opts client.Options) *client.Client {
	t.Helper()
	opts.APIKey = key
	c, err := client.New(s.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// leftovers lists what airlock process pid left on the host: sandbox init
// processes it started, cgroup folders named after it in any hierarchy,
// however deep its own cgroup is (native names them …/airlock/PID-START-ID),
// its entries in native's registry (/run/airlock/native), mounts named
// after it, and files in its TMPDIR. The same kind of scan as the native
// backend's own tests.
func leftovers(pid int, tmp string) []string {
	var out []string
	prefix := strconv.Itoa(pid) + "-"
	// a sandbox's init dies with its server, but the kernel may take a
	// moment to finish it
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out = leakcheck.Inits(pid)
		if len(out) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, d := range leakcheck.Cgroups(pid) {
		out = append(out, "cgroup "+d)
	}
	reg, _ := filepath.Glob(filepath.Join("/run/airlock/native", prefix+"*"))
	for _, r := range reg {
		out = append(out, "registry entry "+r)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, "/"+prefix) {
			out = append(out, "mount "+line)
		}
	}
	if tmp != "" {
		ents, _ := os.ReadDir(tmp)
		for _, e := range ents {
			out = append(out, "temp file "+filepath.Join(tmp, e.Name()))
		}
	}
	return out
}

// ctx is a test's context with a deadline.
func ctx(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// lines reads the lines of a server log that hold s.
func grepLog(log, s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

var _ = errors.Is
