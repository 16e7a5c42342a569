package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg0Exec in argv[0] makes this binary the exec stub: a short-lived
// process that init starts directly in a command's cgroup v2 folder
// (CLONE_INTO_CGROUP), which takes on the command's restrictions itself
// and then executes the command. See spawner.spawn for why.
const Arg0Exec = "airlock-sandbox-exec"

// Descriptors of the exec stub besides stdin, stdout and stderr.
const (
	stubSpecFD  = 3 // the stubSpec, as JSON
	stubErrorFD = 4 // closed on a successful exec; else "errno message"
)

// stubSpec is what the stub needs to become the command.
type stubSpec struct {
	Path   string   `json:"path"`
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	Limits *Limits  `json:"limits"`
}

// startStub starts the exec stub in the cgroup folder dir, hands it the
// command, and waits until it has executed the command or failed.
func (sp *spawner) startStub(path string, spec ExecSpec, files []uintptr, dir *os.File) (int, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer specW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		specR.Close()
		return 0, err
	}
	defer errR.Close()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{Arg0Exec}, &syscall.ProcAttr{
		Files: append(append([]uintptr(nil), files...), specR.Fd(), errW.Fd()),
		Sys:   &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(dir.Fd())},
	})
	specR.Close()
	errW.Close()
	if err != nil {
		return 0, fmt.Errorf("exec stub: %w", err)
	}
	if err := json.NewEncoder(specW).Encode(stubSpec{Path: path, Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir, Limits: sp.limits}); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return 0, fmt.Errorf("exec stub: %w", err)
	}
	specW.Close()
	msg, _ := io.ReadAll(io.LimitReader(errR, 4096))
	if len(msg) == 0 {
		return pid, nil
	}
	// The stub failed and exits; reapLoop reaps it.
	num, text, _ := strings.Cut(string(msg), " ")
	n, _ := strconv.Atoi(num)
	return 0, &stubError{msg: text, errno: unix.Errno(n)}
}

// stubError is the stub's report of why it could not run the command; it
// unwraps to the errno the failure had, if any.
type stubError struct {
	msg   string
	errno unix.Errno
}

func (e *stubError) Error() string { return e.msg }

func (e *stubError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// stubMain is the exec stub's whole life.
func stubMain() int {
	runtime.LockOSThread() // the restrictions are this thread's; exec keeps only it
	unix.CloseOnExec(stubSpecFD)
	unix.CloseOnExec(stubErrorFD)
	errs := os.NewFile(stubErrorFD, "errors")
	fail := func(err error) int {
		var errno unix.Errno
		n := 0
		if errors.As(err, &errno) {
			n = int(errno)
		}
		fmt.Fprintf(errs, "%d %v", n, err)
		return 126
	}
	var s stubSpec
	if err := json.NewDecoder(io.LimitReader(os.NewFile(stubSpecFD, "spec"), 64<<20)).Decode(&s); err != nil {
		return fail(fmt.Errorf("spec: %w", err))
	}
	if s.Limits == nil {
		return fail(errors.New("spec without limits"))
	}
	sp, err := newSpawner(s.Limits)
	if err != nil {
		return fail(err)
	}
	if err := hideCgroups(); err != nil {
		return fail(err)
	}
	if err := unix.Chdir(s.Dir); err != nil {
		return fail(fmt.Errorf("working folder %s: %w", s.Dir, err))
	}
	l := sp.limits
	if err := restrictThread(restrictions{uid: l.UID, gid: l.GID, setGroups: l.SetGroups, seccomp: sp.filter, ruleset: sp.ruleset}); err != nil {
		return fail(err)
	}
	return fail(unix.Exec(s.Path, s.Argv, s.Env))
}
