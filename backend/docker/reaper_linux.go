package docker

import (
	"bufio"
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
)

// A reaper kills what commands leave behind. Docker gives no way to kill
// one exec, and a container's init reaps but never kills, so the backend
// does it: with runc from the host, through the container's cgroup; with
// runsc, whose processes the host cannot see, from inside with an exec.
type reaper interface {
	// sweep kills every process of the sandbox user and returns once
	// none is left. The container's init and keeper run as another user
	// and stay.
	sweep(ctx context.Context) error
	// killExec kills one command and the processes of its session.
	killExec(ctx context.Context, e *execution) error
	// needsPID tells whether killExec needs the command to print its pid.
	needsPID() bool
}

// hostReaper kills from the host, by host pid, what the container's
// cgroup holds.
type hostReaper struct {
	inst *instance
	cg   *cgstat.Group
}

func (r *hostReaper) needsPID() bool { return false }

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
	ins, err := r.inst.cli.ContainerExecInspect(ctx, e.id)
	if err != nil {
		return err
	}
	if ins.Pid == 0 {
		return nil // ended already
	}
	// runc makes each exec's process a session leader
	return r.killUntilGone(ctx, func(st procStatus) bool { return st.uid == sandboxUID && st.session == ins.Pid })
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

func (r *execReaper) needsPID() bool { return true }

// sweepScript kills until kill(-1) finds no process left to signal.
const sweepScript = `n=0; while kill -9 -1 2>/dev/null; do n=$((n+1)); [ $n -lt 10000 ] || exit 1; done`

// killSessionScript kills every process whose session is $1 (the
// command's pid), until none is left.
const killSessionScript = `sid=$1; n=0
while :; do
  found=0
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    set -- ${line##*) }
    [ "$4" = "$sid" ] || continue
    p=${f#/proc/}; p=${p%/stat}
    [ "$p" = "$$" ] || { kill -9 "$p" 2>/dev/null && found=1; }
  done
  [ $found = 1 ] || exit 0
  n=$((n+1)); [ $n -lt 1000 ] || exit 1
done`

func (r *execReaper) sweep(ctx context.Context) error {
	return r.inst.helper(ctx, "sh", "-c", sweepScript)
}

func (r *execReaper) killExec(ctx context.Context, e *execution) error {
	pid := 0
	if e.pid != nil {
		pid = e.pid.get()
	}
	if pid <= 1 {
		return errors.New("the command's pid is unknown")
	}
	return r.inst.helper(ctx, "sh", "-c", killSessionScript, "sh", strconv.Itoa(pid))
}

// helper runs a short command of the backend's own as the sandbox user
// and fails unless it exits 0.
func (i *instance) helper(ctx context.Context, argv ...string) error {
	e, err := i.startExec(ctx, argv, nil, "/", false)
	if err != nil {
		return err
	}
	defer e.close()
	out, _ := io.ReadAll(io.LimitReader(e.hj.Reader, 4096))
	code, err := i.exitCode(e.id)
	if err != nil {
		return err
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
