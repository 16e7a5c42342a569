package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Bounds on the end of a process. KillGrace is how long a killed process
// may take to end before its sandbox is given up; SweepGrace is how long
// a sweep may take (gVisor takes seconds to tear down what a fork bomb
// made, and refuses new processes meanwhile); HoldGrace is how long the
// output may stay open after the process and its leftovers are gone (a
// descriptor passed to a process elsewhere, a KeepAlive one, can hold
// it); the copies are cut then.
const (
	KillGrace  = 10 * time.Second
	SweepGrace = 30 * time.Second
	HoldGrace  = 2 * time.Second
)

// Ops is what a backend does for one process it started.
type Ops interface {
	// Exited is closed once the process itself has ended.
	Exited() <-chan struct{}
	// Status says, once Exited is closed, how the process ended: its exit
	// status as the runtime reports it, 128+N for signal N.
	Status(ctx context.Context) (int, error)
	// Signal sends sig to the process, not to what it started.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Kill kills the process: its timeout passed.
	Kill(ctx context.Context) error
	// Sweep kills what the process left once it ended, sparing the trees
	// of the live processes whose in-sandbox pids are spare.
	Sweep(ctx context.Context, spare []int) error
	// Usage fills res's usage and its OOM and pids reports.
	Usage(res *sandbox.Result)
	// Release frees what the process held. It is called once, last.
	Release()
}

// Output is a process's output being copied into its buffers.
type Output interface {
	// Done is closed once the copies have ended.
	Done() <-chan struct{}
	// Cut ends the copies now.
	Cut()
}

// Config is one started process.
type Config struct {
	// ID names the process (Sandbox.NextID).
	ID   string
	Spec command.Spec
	// Stdout and Stderr keep the output; Output copies into them.
	Stdout, Stderr *command.CapBuffer
	Output         Output
	// Stdin is the process's stdin pipe with OpenStdin, else nil.
	Stdin io.WriteCloser
	// KeepAlive: the process's tree is spared by the sweeps of others
	// until it ends (see Sandbox.Sweeping).
	KeepAlive bool
	// PID is the process's pid inside the sandbox where sweeps need it
	// to spare its tree; 0 otherwise.
	PID      int
	Weakened []string
	// Started is when the runtime was asked to start the process.
	Started time.Time
	Ops     Ops
}

// Process is one process of a container sandbox: it follows the process
// to its end, kills it at its timeout, sweeps what it left, and keeps its
// Result.
type Process struct {
	s     *Sandbox
	id    string
	pid   int
	stdin io.WriteCloser
	ops   Ops

	once sync.Once
	done chan struct{}
	res  sandbox.Result
	err  error
}

var _ sandbox.Process = (*Process)(nil)

// Run follows a started process until its end. The process must have
// been admitted with s.Enter; it leaves when its Result is ready.
func Run(s *Sandbox, c Config) *Process {
	p := &Process{s: s, id: c.ID, pid: c.PID, stdin: c.Stdin, ops: c.Ops, done: make(chan struct{})}
	s.track(p, true)
	go p.run(c)
	return p
}

// ID names the process in its sandbox.
func (p *Process) ID() string { return p.id }

// Stdin is the process's stdin pipe, with OpenStdin.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Signal sends sig to the process; a process that ended is not an error.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	case <-p.ops.Exited():
		return nil
	default:
	}
	return p.ops.Signal(ctx, sig)
}

// Wait waits for the process's Result; every call returns the same.
func (p *Process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return sandbox.Result{ID: p.s.id, Backend: p.s.backend}, ctx.Err()
	}
}

// finish publishes the Result once.
func (p *Process) finish(res sandbox.Result, err error) {
	p.once.Do(func() {
		p.res, p.err = res, err
		close(p.done)
	})
}

func (p *Process) run(c Config) {
	s := p.s
	defer s.procs.Done()
	res := sandbox.Result{ID: s.id, Backend: s.backend, Weakened: c.Weakened,
		Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	released := false
	defer func() {
		if r := recover(); r != nil {
			err := Panicked(s.id, "process "+p.id, r)
			s.track(p, false)
			res.ExitCode = sandbox.ExitFailed
			p.finish(res, err)
			s.Died(err)
			if !released {
				c.Output.Cut()
				c.Ops.Release()
			}
		}
	}()
	err := p.follow(c, &res)
	if p.stdin != nil {
		p.stdin.Close()
	}
	s.fault("result")
	c.Ops.Usage(&res)
	if res.OOMKilled && !res.TimedOut && (res.ExitCode == command.ExitKilled || res.ExitCode == sandbox.ExitFailed) {
		// Killed for memory: the process's own fate, not an error, even
		// where the runtime ended the whole sandbox (gVisor's sentry).
		res.ExitCode, res.Signal, err = sandbox.ExitOOM, "SIGKILL", nil
	}
	released = true
	c.Ops.Release()
	p.finish(res, err)
}

// follow waits for the process's end (killing it at its timeout), sweeps
// what it left, drains its output and reads its exit status.
func (p *Process) follow(c Config, res *sandbox.Result) error {
	s, ops := p.s, c.Ops
	var timeout <-chan time.Time
	if c.Spec.Timeout > 0 {
		t := time.NewTimer(c.Spec.Timeout - time.Since(c.Started))
		defer t.Stop()
		timeout = t.C
	}
	var errs []error
	select {
	case <-ops.Exited():
	case <-s.Done():
	case <-timeout:
		res.TimedOut = true
		ctx, cancel := context.WithTimeout(context.Background(), KillGrace)
		if err := ops.Kill(ctx); err != nil {
			errs = append(errs, fmt.Errorf("kill at the timeout: %w", err))
		}
		cancel()
	}
	if !p.waitExited(ops) {
		err := fmt.Errorf("process %s did not end when killed: %w", p.id, sandbox.ErrDied)
		s.Died(err)
		if !p.waitExited(ops) {
			errs = append(errs, err)
		}
	}
	s.track(p, false)
	if s.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), SweepGrace)
		err := s.Sweeping(p, func(spare []int) error { return ops.Sweep(ctx, spare) })
		cancel()
		if err != nil {
			// what the process left may still run: the sandbox cannot
			// keep its promise, and goes
			err = fmt.Errorf("process %s: sweep: %w", p.id, err)
			s.Died(fmt.Errorf("%w: %w", err, sandbox.ErrDied))
			errs = append(errs, err)
		}
	}
	select {
	case <-c.Output.Done():
	case <-time.After(HoldGrace):
		c.Output.Cut()
		<-c.Output.Done()
	}
	res.DurationMS = float64(time.Since(c.Started).Microseconds()) / 1000
	res.Stdout, res.StdoutTruncated = c.Stdout.String(), c.Stdout.Truncated()
	res.Stderr, res.StderrTruncated = c.Stderr.String(), c.Stderr.Truncated()
	ctx, cancel := context.WithTimeout(context.Background(), KillGrace)
	code, serr := ops.Status(ctx)
	cancel()
	switch {
	case res.TimedOut:
		res.ExitCode, res.Signal = sandbox.ExitTimeout, "SIGKILL"
	case serr != nil:
		res.ExitCode = sandbox.ExitFailed
		if gone := s.Err(); gone != nil {
			serr = fmt.Errorf("%w (%w)", gone, serr)
		}
		errs = append(errs, serr)
	default:
		res.ExitCode, res.Signal = code, command.SignalOf(code)
	}
	return errors.Join(errs...)
}

// waitExited waits for the process to end, at most KillGrace once the
// sandbox ended or the process was killed; a process that runs as it
// should is waited for without bound.
func (p *Process) waitExited(ops Ops) bool {
	select {
	case <-ops.Exited():
		return true
	case <-time.After(KillGrace):
		return false
	}
}
