package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/procs"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Under runsc the host sees none of the sandbox's processes: a process's
// output comes through the daemon's attached exec, its shell prints its
// pid inside the sandbox as its first line (command.PIDLine) before the
// command runs, and what the host must do inside (signal, kill, sweep) a
// root helper does: an exec of the daemon's as uid 0 with the
// capabilities inside gVisor, which the code can neither signal nor
// trace, and which the sandbox user's RLIMIT_NPROC does not hold back.

// startRunsc starts one process under runsc.
func (i *instance) startRunsc(ctx context.Context, spec command.Spec, ps sandbox.ProcessSpec) (*procs.Process, error) {
	started := time.Now()
	placed := i.sb.Placing()
	release := sync.OnceFunc(placed)
	defer release()
	id := i.sb.NextID()
	withStdin := ps.OpenStdin || ps.Stdin != nil
	opts := container.ExecOptions{User: sandboxUser, AttachStdin: withStdin, AttachStdout: true, AttachStderr: true,
		Env: spec.Env, WorkingDir: spec.Dir, Cmd: command.Wrap(spec, command.WrapOptions{MarkPID: true})}
	var (
		e              *execution
		out            *stream
		stdout, stderr *command.CapBuffer
		pid            int
		err            error
	)
	// the runtime refuses an exec while a fork bomb's leftovers fill the
	// sandbox's caps ("try again"): they are going
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if e, err = i.attach(ctx, opts); err != nil {
			return nil, err
		}
		stdout, stderr = buffers(spec, ps)
		line := command.NewPIDLine(stdout)
		out = e.pump(i, line, stderr)
		select {
		case <-line.Ready():
		case <-time.After(procs.KillGrace):
		case <-ctx.Done():
		}
		if pid, err = line.PID(); err == nil {
			break
		}
		out.Cut()
		<-out.Done()
		if !command.RuntimeFull(err) || time.Since(started) > procs.SweepGrace || ctx.Err() != nil {
			break
		}
		time.Sleep(wait)
	}
	if err != nil {
		// A process whose pid is unknown cannot be spared: a sweep that
		// spares the live processes' trees takes it.
		release()
		sctx, cancel := context.WithTimeout(context.Background(), procs.SweepGrace)
		defer cancel()
		serr := i.sb.Sweeping(nil, func(spare []int) error { return i.helper(sctx, command.ReapArgs(sandboxUID, 0, spare)) })
		return nil, errors.Join(err, serr)
	}
	p := &runscProcess{inst: i, execID: e.id, e: e, pid: pid, out: out, exited: make(chan struct{}), usage: cgstat.Begin(i.stat)}
	cfg := procs.Config{ID: id, Spec: spec, Stdout: stdout, Stderr: stderr, Output: out,
		KeepAlive: ps.KeepAlive, PID: pid, Weakened: i.weakened, Started: started, Ops: p}
	switch {
	case ps.OpenStdin:
		cfg.Stdin = e.stdin()
	case ps.Stdin != nil:
		w := e.stdin()
		i.sb.Go(func() {
			_, _ = io.Copy(w, ps.Stdin)
			w.Close()
		})
	}
	i.sb.Go(p.follow)
	// placed only once tracked: a sweep in between would not spare it
	proc := procs.Run(i.sb, cfg)
	release()
	return proc, nil
}

// runscProcess is one process under runsc, known by its pid inside.
type runscProcess struct {
	inst   *instance
	execID string
	e      *execution
	pid    int
	out    *stream
	usage  cgstat.Usage
	exited chan struct{}
}

var _ procs.Ops = (*runscProcess)(nil)

// follow closes exited once the daemon says the exec ended. Nothing else
// tells: the exec's streams end when the process and whatever it started
// close them (the daemon cuts them two seconds after the exec ended), so
// the daemon is asked, less often as the process runs on.
func (p *runscProcess) follow() {
	defer close(p.exited)
	outDone := p.out.Done()
	for wait := time.Millisecond; ; wait = min(2*wait, execPoll) {
		select {
		case <-p.inst.sb.Done():
			return
		case <-outDone:
			outDone = nil
		case <-time.After(wait):
		}
		ins, err := p.inst.cli.ContainerExecInspect(context.Background(), p.execID)
		if err != nil || !ins.Running {
			return
		}
	}
}

// execPoll is how often, at most, the daemon is asked whether a process
// under runsc still runs.
const execPoll = 100 * time.Millisecond

// Exited is closed when the process has ended.
func (p *runscProcess) Exited() <-chan struct{} { return p.exited }

// Status reads the exit status the daemon recorded. runsc's own failures
// are 128; so is the end of the sandbox under the process.
func (p *runscProcess) Status(ctx context.Context) (int, error) {
	code, err := execStatus(ctx, p.inst, p.execID)
	if err == nil && code == 128 && p.inst.stopped(ctx) {
		return 0, fmt.Errorf("the sandbox ended under the process (runsc exec exited %d)", code)
	}
	return code, err
}

// Signal has the root helper signal the process.
func (p *runscProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.inst.helper(ctx, command.SignalArgs(int(sig), p.pid))
}

// Kill has the root helper kill the process; what it started goes with
// the sweep that follows its end.
func (p *runscProcess) Kill(ctx context.Context) error {
	return p.inst.helper(ctx, command.SignalArgs(int(syscall.SIGKILL), p.pid))
}

// Sweep has the root helper kill every process of the sandbox user that
// is not in the tree of a live process.
func (p *runscProcess) Sweep(ctx context.Context, spare []int) error {
	err := p.inst.helper(ctx, command.ReapArgs(sandboxUID, p.pid, spare))
	if err != nil && p.inst.stoppedWithin(ctx, 5*time.Second) {
		return nil // the container ended: nothing is left in it
	}
	return err
}

// stoppedWithin tells whether the container stops within d: runsc may
// refuse an exec ("cannot exec in a stopped state") before the daemon
// has seen the container end.
func (i *instance) stoppedWithin(ctx context.Context, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if i.stopped(ctx) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
	}
}

// Usage reads the container's counters (the host cannot tell one
// process's share under gVisor), and whether the host's OOM killer ended
// the sandbox.
func (p *runscProcess) Usage(res *sandbox.Result) {
	p.usage.Fill(res)
	ctx, cancel := context.WithTimeout(context.Background(), procs.KillGrace)
	defer cancel()
	if p.inst.stopped(ctx) {
		select {
		case <-p.inst.exited:
		case <-ctx.Done():
		}
		res.OOMKilled = res.OOMKilled || p.inst.oomKilled()
	}
}

// Release closes the exec's connection.
func (p *runscProcess) Release() { p.e.close() }

// stopped tells whether the container no longer runs: its end may reach
// an exec before the daemon's wait does.
func (i *instance) stopped(ctx context.Context) bool {
	select {
	case <-i.exited:
		return true
	default:
	}
	st, err := i.cli.ContainerInspect(ctx, i.cid)
	return notFound(err) || err == nil && st.State != nil && !st.State.Running
}

// oomKilled tells, once the container stopped, whether it was for memory.
func (i *instance) oomKilled() bool {
	select {
	case <-i.exited:
		return i.oom
	default:
		return false
	}
}

// execution is one exec of the daemon, attached.
type execution struct {
	id string
	hj types.HijackedResponse
}

// attach creates and starts an exec attached to its streams.
func (i *instance) attach(ctx context.Context, opts container.ExecOptions) (*execution, error) {
	created, err := i.cli.ContainerExecCreate(ctx, i.cid, opts)
	if err != nil {
		return nil, err
	}
	hj, err := i.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, err
	}
	return &execution{id: created.ID, hj: hj}, nil
}

func (e *execution) close() { e.hj.Close() }

// stdin is the exec's stdin; closing it ends the process's input.
func (e *execution) stdin() io.WriteCloser { return execStdin{e} }

type execStdin struct{ e *execution }

func (s execStdin) Write(p []byte) (int, error) { return s.e.hj.Conn.Write(p) }
func (s execStdin) Close() error                { return s.e.hj.CloseWrite() }

// stream is an exec's output, demultiplexed into the process's buffers.
type stream struct {
	e    *execution
	done chan struct{}
}

var _ procs.Output = (*stream)(nil)

// pump copies the exec's output until it ends; line learns that the
// output ended.
func (e *execution) pump(i *instance, line *command.PIDLine, stderr io.Writer) *stream {
	s := &stream{e: e, done: make(chan struct{})}
	i.sb.Go(func() {
		defer close(s.done)
		_, _ = stdcopy.StdCopy(line, stderr, e.hj.Reader)
		line.End()
	})
	return s
}

// Done is closed once the output ended.
func (s *stream) Done() <-chan struct{} { return s.done }

// Cut closes the exec's connection, which ends the copy.
func (s *stream) Cut() { s.e.close() }

// helperAttempts bounds how often helper retries an exec that the runtime
// failed to start: runsc's exec fails now and then ("OCI runtime exec
// failed ... exit status 128") and succeeds when asked again.
const helperAttempts = 3

// helper runs a command of the backend's own as root inside the sandbox
// (runsc only) and fails unless it exits 0.
func (i *instance) helper(ctx context.Context, argv []string) error {
	failed := 0
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := i.helperOnce(ctx, argv)
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case command.RuntimeFull(err):
			time.Sleep(wait)
		case errors.Is(err, errRuntimeExec) && failed < helperAttempts:
			failed++
			i.backend.opts.Logger.Warn("runtime failed to start a helper; trying again", "sandbox", i.id, "err", err)
		default:
			return err
		}
	}
}

// errRuntimeExec marks an exec that the runtime failed to start, which
// the daemon reports as exit status 126 with its message on the stream.
var errRuntimeExec = errors.New("the runtime failed to start the exec")

func (i *instance) helperOnce(ctx context.Context, argv []string) error {
	e, err := i.attach(ctx, container.ExecOptions{User: helperUser, Privileged: true, AttachStdout: true, AttachStderr: true, WorkingDir: "/", Cmd: argv})
	if err != nil {
		return err
	}
	defer e.close()
	// the daemon may never end the stream (a runtime stuck in exec):
	// closing the connection ends the read when ctx does
	defer context.AfterFunc(ctx, e.close)()
	out, _ := io.ReadAll(io.LimitReader(e.hj.Reader, 4096))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("helper: %w", err)
	}
	code, err := execStatus(ctx, i, e.id)
	if err != nil {
		return err
	}
	if code == 126 && bytes.Contains(out, []byte("OCI runtime exec failed")) {
		return fmt.Errorf("helper: %w: %q", errRuntimeExec, out)
	}
	if code != 0 {
		return fmt.Errorf("helper exited %d: %q", code, out)
	}
	return nil
}
