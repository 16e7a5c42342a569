package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
)

// A reaper does what Docker leaves to the backend around each command,
// which differs with the runtime. Docker gives no way to kill one exec,
// and a container's pid 1 reaps but never kills, so the reaper kills:
// with runc from the host, through the container's cgroup; with runsc,
// whose processes the host cannot see, from inside with an exec. With
// runc it also gives each command its OOM score with the privilege that
// makes the score a floor.
type reaper interface {
	// wrapOptions say how the command's shell starts (see command.Wrap).
	wrapOptions() command.WrapOptions
	// started runs once the exec has started, before the command runs.
	started(ctx context.Context, e *execution) error
	// sweep kills every process of the sandbox user and returns once
	// none is left. The container's init and keeper run as another user
	// and stay.
	sweep(ctx context.Context) error
	// killExec kills one command and the processes of its session.
	killExec(ctx context.Context, e *execution) error
}

// hostReaper kills from the host, by host pid, what the container's
// cgroup holds.
type hostReaper struct {
	inst *instance
	cg   *cgstat.Group
}

func (r *hostReaper) wrapOptions() command.WrapOptions { return command.WrapOptions{StopFirst: true} }

// started raises the command's OOM score while its shell is stopped: runc
// starts execs without CAP_SYS_RESOURCE, so the score it sets is no floor.
func (r *hostReaper) started(ctx context.Context, e *execution) error {
	pid, err := r.hostPID(ctx, e)
	if err != nil {
		return err
	}
	return command.RaiseOOMScore(ctx, pid)
}

// hostPID is the host pid of an exec's process, once the daemon knows it
// (an exec not yet started reads as not running, with no pid).
func (r *hostReaper) hostPID(ctx context.Context, e *execution) (int, error) {
	for {
		ins, err := r.inst.cli.ContainerExecInspect(ctx, e.id)
		if err != nil {
			return 0, err
		}
		if ins.Pid != 0 {
			return ins.Pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-e.done:
			return 0, fmt.Errorf("exec %s ended before its pid was known", e.id)
		case <-time.After(time.Millisecond):
		}
	}
}

// sweep also waits for the killed processes to be reaped: until then
// they count against the pids cap, and a command started at once could
// find it full.
func (r *hostReaper) sweep(ctx context.Context) error {
	if err := r.killUntilGone(ctx, func(st procStatus) bool { return st.uid == sandboxUID }); err != nil {
		return err
	}
	for {
		n, ok := r.cg.Tasks()
		if !ok || n <= KeeperTasks {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d tasks not reaped: %w", n, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (r *hostReaper) killExec(ctx context.Context, e *execution) error {
	pid, err := r.hostPID(ctx, e)
	if err != nil {
		return err
	}
	// runc makes each exec's process a session leader
	return r.killUntilGone(ctx, func(st procStatus) bool { return st.uid == sandboxUID && st.session == pid })
}

// killUntilGone kills the cgroup's processes that match until none is
// left; a process may fork between the listing and the kill, so it lists
// again.
func (r *hostReaper) killUntilGone(ctx context.Context, match func(procStatus) bool) error {
	for {
		pids, err := r.cg.Procs()
		if err != nil {
			return fmt.Errorf("list the container's processes: %w", err)
		}
		left := 0
		for _, pid := range pids {
			if st, ok := readStatus(pid); ok && match(st) {
				left++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d processes still alive: %w", left, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// procStatus is what the host reaper needs of a process.
type procStatus struct {
	uid, session int
}

// readStatus reads a live process's real uid and session (as this pid
// namespace numbers it). Zombies and vanished processes give false.
func readStatus(pid int) (procStatus, bool) {
	var st procStatus
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// state ppid pgrp session ...
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return st, false
	}
	st.session, _ = strconv.Atoi(f[3])
	sf, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return st, false
	}
	defer sf.Close()
	sc := bufio.NewScanner(sf)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			ids := strings.Fields(rest)
			if len(ids) > 0 {
				st.uid, err = strconv.Atoi(ids[0])
				return st, err == nil
			}
		}
	}
	return st, false
}

// execReaper kills from inside the container, with execs of the sandbox
// user's shell: kill(-1) reaches every process that user may signal, which
// is every process but the exec's own and the container's init and
// keeper.
type execReaper struct {
	inst *instance
}

func (r *execReaper) wrapOptions() command.WrapOptions { return command.WrapOptions{MarkPID: true} }

// started has nothing to do: OOM scores inside gVisor are the sentry's
// own, and the sentry's host score is the container's.
func (r *execReaper) started(ctx context.Context, e *execution) error { return nil }

func (r *execReaper) sweep(ctx context.Context) error {
	return command.RetryWhileFull(ctx, func() error { return r.inst.helper(ctx, "sh", "-c", command.SweepScript) })
}

func (r *execReaper) killExec(ctx context.Context, e *execution) error {
	pid := 0
	if e.pid != nil {
		pid = e.pid.PID()
	}
	if pid <= 1 {
		return errors.New("the command's pid is unknown")
	}
	return r.inst.helper(ctx, "sh", "-c", command.KillSessionScript, "sh", strconv.Itoa(pid))
}

// helperAttempts bounds how often helper retries an exec that the runtime
// failed to start: runsc's exec fails now and then ("OCI runtime exec
// failed ... exit status 128", seen once in a suite run here) and
// succeeds when asked again.
const helperAttempts = 3

// helper runs a short command of the backend's own as the sandbox user
// and fails unless it exits 0.
func (i *instance) helper(ctx context.Context, argv ...string) error {
	for attempt := 1; ; attempt++ {
		err := i.helperOnce(ctx, argv)
		if !errors.Is(err, errRuntimeExec) || attempt == helperAttempts || ctx.Err() != nil {
			return err
		}
		i.backend.opts.Logger.Warn("runtime failed to start a helper; trying again", "sandbox", i.id, "err", err)
	}
}

// errRuntimeExec marks an exec that the runtime failed to start, which
// the daemon reports as exit status 126 with its message on the stream.
var errRuntimeExec = errors.New("the runtime failed to start the exec")

func (i *instance) helperOnce(ctx context.Context, argv []string) error {
	e, err := i.startExec(ctx, argv, nil, "/", false)
	if err != nil {
		return err
	}
	defer e.close()
	// the daemon may never end the stream (a runtime stuck in exec):
	// closing the connection ends the read when ctx does
	defer context.AfterFunc(ctx, e.close)()
	out, _ := io.ReadAll(io.LimitReader(e.hj.Reader, 4096))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	code, err := i.exitCode(e.id)
	if err != nil {
		return err
	}
	if code == 126 && bytes.Contains(out, []byte("OCI runtime exec failed")) {
		return fmt.Errorf("%s: %w: %q", argv[0], errRuntimeExec, out)
	}
	if code != 0 {
		return fmt.Errorf("%s exited %d: %q", argv[0], code, out)
	}
	return nil
}

// newReaper picks the reaper for the runtime: the host one needs the
// container's cgroup and host-visible processes (runc).
func newReaper(i *instance, runtimeName string) reaper {
	if runtimeName == RuntimeRunc && i.cg != nil {
		return &hostReaper{inst: i, cg: i.cg}
	}
	return &execReaper{inst: i}
}
