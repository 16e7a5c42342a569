package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/procs"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"
)

// A process under runc is followed from the host: the daemon only starts
// it. Its stdio are FIFOs in the sandbox's io folder, which its shell
// opens before anything else (no byte of output passes through the
// daemon); the shell then stops itself; the host finds its pid
// (ExecInspect), takes a pidfd of it, moves it into a cgroup of its own,
// raises its OOM score and continues it. The host waits on the pidfd, and
// reads the exit status from the daemon.

// startRunc starts one process under runc.
func (i *instance) startRunc(ctx context.Context, spec command.Spec, ps sandbox.ProcessSpec) (*procs.Process, error) {
	started := time.Now()
	placed := i.sb.Placing()
	defer func() {
		if placed != nil {
			placed()
		}
	}()
	id := i.sb.NextID()
	p := &runcProcess{inst: i, exited: make(chan struct{}), pidfd: -1}
	ok := false
	defer func() {
		if !ok {
			p.abandon()
		}
	}()
	var err error
	if p.fifos, err = i.dir.MakeFIFOs(ps.OpenStdin || ps.Stdin != nil); err != nil {
		return nil, err
	}
	lim := i.policy.Limits
	if p.cg, err = i.cg.newProc("airlock-"+id, procLimits{memory: lim.MemoryBytes, pids: lim.Pids}); err != nil {
		return nil, err
	}
	created, err := i.cli.ContainerExecCreate(ctx, i.cid, container.ExecOptions{
		User: sandboxUser, Env: spec.Env, WorkingDir: spec.Dir,
		Cmd: command.Wrap(spec, command.WrapOptions{Stdio: &p.fifos.Paths, StopFirst: true}),
	})
	if err != nil {
		return nil, err
	}
	p.execID = created.ID
	if err := i.cli.ContainerExecStart(ctx, p.execID, container.ExecStartOptions{Detach: true}); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, procs.KillGrace)
	defer cancel()
	if err := p.place(sctx); err != nil {
		return nil, err
	}
	placed()
	placed = nil
	if err := unix.PidfdSendSignal(p.pidfd, unix.SIGCONT, nil, 0); err != nil {
		return nil, fmt.Errorf("continue the process: %w", err)
	}
	stdout, stderr := buffers(spec, ps)
	out := procs.CopyPipes(i.sb, p.fifos.Stdout, p.fifos.Stderr, stdout, stderr)
	p.fifos.Stdout, p.fifos.Stderr = nil, nil
	cfg := procs.Config{ID: id, Spec: spec, Stdout: stdout, Stderr: stderr, Output: out,
		KeepAlive: ps.KeepAlive, Weakened: i.weakened, Started: started, Ops: p}
	switch {
	case ps.OpenStdin:
		cfg.Stdin = p.fifos.Stdin
	case ps.Stdin != nil:
		w := p.fifos.Stdin
		i.sb.Go(func() {
			_, _ = io.Copy(w, ps.Stdin)
			w.Close()
		})
	}
	i.sb.Go(p.waitExit)
	ok = true
	return procs.Run(i.sb, cfg), nil
}

// runcProcess is one process under runc, seen from the host.
type runcProcess struct {
	inst   *instance
	execID string
	fifos  *hostdir.FIFOs
	cg     *procCgroup
	pid    int        // host pid
	fdMu   sync.Mutex // guards pidfd between Signal and Release
	pidfd  int
	usage  cgstat.Usage
	exited chan struct{}
	once   sync.Once
}

var _ procs.Ops = (*runcProcess)(nil)

// place finds the process's host pid once the daemon knows it, waits for
// its shell to have opened its stdio and stopped, and moves it into its
// cgroup with its OOM score raised.
func (p *runcProcess) place(ctx context.Context) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ins, err := p.inst.cli.ContainerExecInspect(ctx, p.execID)
		if err != nil {
			return err
		}
		if ins.Pid != 0 {
			p.pid = ins.Pid
			break
		}
		if !ins.Running && ins.ExitCode != 0 {
			return fmt.Errorf("the process's shell failed before it ran (exit status %d)", ins.ExitCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the daemon did not say the process's pid: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd of process %d: %w", p.pid, err)
	}
	p.pidfd = fd
	// the pid is the exec's as long as it runs as the sandbox user in
	// the container (the pidfd pins it from here on)
	if uid := processUID(p.pid); uid != p.inst.daemon.hostUID(sandboxUID) {
		return fmt.Errorf("process %d runs as host uid %d, not the sandbox user's", p.pid, uid)
	}
	if err := command.WaitStopped(ctx, p.pid); err != nil {
		return err
	}
	if err := p.cg.add(p.pid); err != nil {
		return err
	}
	if err := command.SetOOMScore(p.pid); err != nil {
		return err
	}
	p.usage = cgstat.Begin(p.cg.stat)
	return p.fifos.Opened()
}

// waitExit closes exited when the pidfd says the process ended.
func (p *runcProcess) waitExit() {
	defer p.markExited()
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

func (p *runcProcess) markExited() { p.once.Do(func() { close(p.exited) }) }

// Exited is closed when the process has ended.
func (p *runcProcess) Exited() <-chan struct{} { return p.exited }

// Status reads the exit status the daemon recorded. It records it a
// moment after the process ends.
func (p *runcProcess) Status(ctx context.Context) (int, error) {
	return execStatus(ctx, p.inst, p.execID)
}

// execStatus waits for the daemon to record an exec's end, and returns
// its exit status.
func execStatus(ctx context.Context, i *instance, execID string) (int, error) {
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		ins, err := i.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, fmt.Errorf("exit status: %w", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("exit status: the process ended but the daemon says it runs: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Signal signals the process through its pidfd.
func (p *runcProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	err := p.pidfdSignal(sig)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// Kill kills the process and everything in its cgroup.
func (p *runcProcess) Kill(ctx context.Context) error {
	_ = p.pidfdSignal(unix.SIGKILL)
	return p.cg.kill()
}

// pidfdSignal sends sig through the pidfd, unless Release has closed it
// (the process ended and was waited for): a closed descriptor's number
// may already name another file.
func (p *runcProcess) pidfdSignal(sig syscall.Signal) error {
	p.fdMu.Lock()
	defer p.fdMu.Unlock()
	if p.pidfd < 0 {
		return nil
	}
	return unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
}

// Sweep kills what the process left in its cgroup, and the sandbox
// user's processes in the container's own folders, which no process's
// cgroup holds: escapees.
func (p *runcProcess) Sweep(ctx context.Context, spare []int) error {
	if err := p.cg.kill(); err != nil {
		return err
	}
	return p.inst.cg.killEscapees(p.inst.daemon.hostUID(sandboxUID))
}

// Usage reads the process's cgroup counters.
func (p *runcProcess) Usage(res *sandbox.Result) { p.usage.Fill(res) }

// Release removes the process's cgroup and closes what the host held.
func (p *runcProcess) Release() {
	if err := p.cg.remove(); err != nil {
		p.inst.backend.opts.Logger.Warn("removing a process's cgroup", "sandbox", p.inst.id, "err", err)
	}
	p.fifos.Close()
	p.fdMu.Lock()
	defer p.fdMu.Unlock()
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// abandon undoes a start that failed: the process, if any, is killed with
// its cgroup, and everything released.
func (p *runcProcess) abandon() {
	if p.pidfd >= 0 {
		_ = unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0)
	}
	if p.cg != nil {
		_ = p.cg.kill()
		_ = p.cg.remove()
		p.cg = nil
	}
	if p.fifos != nil {
		for _, f := range []*os.File{p.fifos.Stdout, p.fifos.Stderr} {
			if f != nil {
				f.Close()
			}
		}
		p.fifos.Close()
	}
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
	}
}
