package microvm

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// process is one process started in a microvm sandbox.
type process struct {
	i    *instance
	seq  uint64
	spec command.Spec

	stdin          *wire.Stream // nil without a stdin stream
	stdout, stderr *wire.Stream
	openStdin      bool

	endOnce sync.Once
	exit    chan *wire.Exit // the guest's report; nil when the sandbox ended first

	done chan struct{}
	res  sandbox.Result
	err  error
}

var _ sandbox.Process = (*process)(nil)

// Start starts one process in the guest and returns once it runs.
func (i *instance) Start(ctx context.Context, ps sandbox.ProcessSpec) (sandbox.Process, error) {
	spec, err := command.Check(i.policy, ps, i.imageEnv)
	if err != nil {
		return nil, err
	}
	p := &process{i: i, seq: i.seq.Add(1), spec: spec, exit: make(chan *wire.Exit, 1), done: make(chan struct{}),
		openStdin: ps.OpenStdin}
	i.mu.Lock()
	if i.gone != nil {
		i.mu.Unlock()
		return nil, i.gone
	}
	i.running.Add(1)
	i.procs[p.seq] = p
	i.mu.Unlock()
	fail := func(err error) (sandbox.Process, error) {
		i.mu.Lock()
		delete(i.procs, p.seq)
		i.mu.Unlock()
		p.closeStreams()
		i.running.Done()
		return nil, err
	}
	if p.stdout, err = i.conn.Open(); err == nil {
		p.stderr, err = i.conn.Open()
	}
	if err == nil && (ps.Stdin != nil || ps.OpenStdin) {
		p.stdin, err = i.conn.Open()
	}
	if err != nil {
		return fail(i.goneOr(err))
	}
	st := &wire.Start{Proc: p.seq, Cmd: ps.Cmd, Env: ps.Env, Dir: ps.Dir, Timeout: ps.Timeout, KeepAlive: ps.KeepAlive,
		OutputLimit: ps.OutputLimit, Stdout: p.stdout.ID(), Stderr: p.stderr.ID()}
	if p.stdin != nil {
		st.Stdin = p.stdin.ID()
	}
	if _, err := i.call(ctx, wire.Msg{Op: wire.OpStart, Start: st}); err != nil {
		return fail(fmt.Errorf("start process: %w", err))
	}
	go p.run(ps)
	return p, nil
}

// ended hands the guest's report to run, once; nil means the sandbox
// ended before the process did.
func (p *process) ended(ex *wire.Exit) {
	p.endOnce.Do(func() {
		p.exit <- ex
	})
}

func (p *process) closeStreams() {
	for _, s := range []*wire.Stream{p.stdin, p.stdout, p.stderr} {
		if s != nil {
			s.Close()
		}
	}
}

// ID names the process in its sandbox.
func (p *process) ID() string { return "p" + strconv.FormatUint(p.seq, 10) }

// Stdin is the process's stdin with OpenStdin; closing it gives the
// process end of file.
func (p *process) Stdin() io.WriteCloser {
	if !p.openStdin {
		return nil
	}
	return stdinWriter{p.stdin}
}

type stdinWriter struct{ s *wire.Stream }

func (w stdinWriter) Write(b []byte) (int, error) { return w.s.Write(b) }
func (w stdinWriter) Close() error                { return w.s.CloseWrite() }

// Signal asks the guest to signal the process.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_, err := p.i.call(ctx, wire.Msg{Op: wire.OpSignal, Signal: &wire.Signal{Proc: p.seq, Signal: int(sig)}})
	return err
}

// Wait waits for the process's Result.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return sandbox.Result{ID: p.i.id, Backend: "microvm"}, ctx.Err()
	}
}

// run follows the process to its end: it copies the output streams into
// capped buffers, feeds stdin, kills the machine if the guest does not
// report the end in time, and makes the Result.
func (p *process) run(ps sandbox.ProcessSpec) {
	i := p.i
	defer i.running.Done()
	stdout := command.NewCapBuffer(p.spec.OutputLimit, ps.Stdout)
	stderr := command.NewCapBuffer(p.spec.OutputLimit, ps.Stderr)
	var copied sync.WaitGroup
	copied.Add(2)
	go func() { defer copied.Done(); _, _ = io.Copy(stdout, p.stdout) }()
	go func() { defer copied.Done(); _, _ = io.Copy(stderr, p.stderr) }()
	if ps.Stdin != nil {
		go func() {
			if _, err := io.Copy(p.stdin, ps.Stdin); err == nil {
				_ = p.stdin.CloseWrite()
			}
		}()
	}
	var watchdog <-chan time.Time
	if p.spec.Timeout > 0 {
		t := time.NewTimer(p.spec.Timeout + i.b.opts.WedgeGrace)
		defer t.Stop()
		watchdog = t.C
	}
	var ex *wire.Exit
	select {
	case ex = <-p.exit:
	case <-watchdog:
		go func() {
			_ = i.kill(fmt.Errorf("sandbox %s: the guest did not end process %s within %v of its timeout: %w",
				i.id, p.ID(), i.b.opts.WedgeGrace, sandbox.ErrDied))
		}()
		ex = <-p.exit
	}
	outputDone := make(chan struct{})
	go func() { copied.Wait(); close(outputDone) }()
	select {
	case <-outputDone:
	case <-time.After(5 * time.Second):
	}
	p.closeStreams()
	<-outputDone
	res := sandbox.Result{ExitCode: sandbox.ExitFailed}
	var err error
	if ex != nil {
		res = ex.Result
		if ex.Error != "" {
			err = wire.Errorf(ex.Error, ex.Kind)
		}
	} else {
		err = i.goneOr(sandbox.ErrDestroyed)
	}
	res.ID, res.Backend = i.id, "microvm"
	res.Stdout = stdout.String() + extra(res.Stdout)
	res.Stderr = stderr.String() + extra(res.Stderr)
	res.StdoutTruncated = res.StdoutTruncated || stdout.Truncated()
	res.StderrTruncated = res.StderrTruncated || stderr.Truncated()
	res.Weakened = i.weakened
	res.BackendDetails = maps.Clone(i.details)
	res.Artifacts, res.Egress = []sandbox.Artifact{}, []sandbox.EgressEvent{}
	p.res, p.err = res, err
	close(p.done)
}

// extra is what the guest's Result adds to a stream's output, within its
// bound.
func extra(s string) string { return s[:min(len(s), wire.MaxExtraOutput)] }
