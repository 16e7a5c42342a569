package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/kubernetes/agent"
	"github.com/airlock-sandbox/airlock/sandbox"
	corev1 "k8s.io/api/core/v1"
)

// Bounds on a process's end, beyond its own timeout.
const (
	// killGrace is how long a shepherd told to kill may take to report
	// the exit before the exec stream is cut (which kills too).
	killGrace = 5 * time.Second
	// pingWait bounds the question whether a sandbox whose process's
	// stream broke still answers.
	pingWait = 5 * time.Second
	// diedWait is how long a process whose stream broke, in a sandbox
	// that no longer answers, waits for the cluster to say the Pod ended
	// and why (its memory cap, say): the kubelet reports a container's
	// end some seconds after it, more on a loaded node.
	diedWait = 60 * time.Second
)

// process is one command: one exec of the agent's shepherd.
type process struct {
	i     *instance
	id    string
	spec  command.Spec
	start time.Time

	frames  sync.Mutex // frames to the shepherd are written whole
	toAgent *io.PipeWriter
	stdin   *stdinWriter // with OpenStdin

	stdout, stderr *command.CapBuffer
	cancel         context.CancelFunc // cuts the exec stream

	started chan agent.Started // the shepherd's first frame
	done    chan struct{}      // closed when res and err are final
	res     sandbox.Result
	err     error
}

var _ sandbox.Process = (*process)(nil)

// Start runs one process through a new shepherd.
func (i *instance) Start(ctx context.Context, ps sandbox.ProcessSpec) (sandbox.Process, error) {
	if err := i.alive(); err != nil {
		return nil, err
	}
	spec, err := command.Check(i.policy, ps, i.image.Env, i.proxyEnv)
	if err != nil {
		return nil, err
	}
	lim := i.policy.Limits
	i.mu.Lock()
	i.seq++
	p := &process{i: i, id: "p" + strconv.Itoa(i.seq), spec: spec, start: time.Now(),
		stdout: command.NewCapBuffer(spec.OutputLimit, ps.Stdout), stderr: command.NewCapBuffer(spec.OutputLimit, ps.Stderr),
		started: make(chan agent.Started, 1), done: make(chan struct{})}
	i.procs[p] = struct{}{}
	i.mu.Unlock()
	run := agent.RunSpec{Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir, Stdin: ps.Stdin != nil || ps.OpenStdin,
		Keep: spec.OutputLimit, Stream: ps.Stdout != nil || ps.Stderr != nil, Timeout: int64(spec.Timeout),
		NProc: uint64(lim.Pids + AgentTasks), NoFile: uint64(lim.OpenFiles), FSize: uint64(lim.DiskBytes)}
	fromAgent, toHost := io.Pipe()
	toShepherd, toAgent := io.Pipe()
	p.toAgent = toAgent
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.stream(sctx, toShepherd, toHost, fromAgent)
	if err := p.send(agent.FrameSpec, mustJSON(run)); err != nil {
		p.abort()
		<-p.done
		return nil, p.err
	}
	if ps.OpenStdin {
		p.stdin = &stdinWriter{p: p}
	} else if ps.Stdin != nil {
		go p.feed(ps.Stdin)
	}
	select {
	case st := <-p.started:
		return p.begun(st)
	case <-p.done:
		// a quick process's exit may be read as soon as its start
		select {
		case st := <-p.started:
			return p.begun(st)
		default:
		}
		if p.err == nil {
			return nil, fmt.Errorf("process %s: its shepherd ended before the process started: %w", p.id, sandbox.ErrDied)
		}
		return nil, p.err
	case <-ctx.Done():
		p.abort()
		<-p.done
		return nil, ctx.Err()
	}
}

// begun is Start's answer once the shepherd said whether the process
// started.
func (p *process) begun(st agent.Started) (sandbox.Process, error) {
	if st.Error != "" {
		p.abort()
		<-p.done
		return nil, fmt.Errorf("start %q: %s", p.spec.Argv, st.Error)
	}
	return p, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// stream runs the exec of the shepherd and reads its frames until the
// exit; then it makes the Result final.
func (p *process) stream(ctx context.Context, stdin *io.PipeReader, stdout *io.PipeWriter, frames *io.PipeReader) {
	var stderr limitedWriter
	var stderrBuf syncBuf
	stderr = limitedWriter{w: &stderrBuf, n: 4096}
	execDone := make(chan error, 1)
	go func() {
		err := p.i.b.execStream(ctx, p.i.pod, sandboxContainer, []string{AgentPath, agent.CmdRun}, stdin, stdout, &stderr)
		stdout.CloseWithError(io.EOF)
		// client-go may still copy stdin: it gets the end of it
		p.toAgent.Close()
		execDone <- err
	}()
	// The shepherd keeps the timeout; this is a backstop should it hang.
	var backstop atomic.Bool
	if p.spec.Timeout > 0 {
		t := time.AfterFunc(p.spec.Timeout+2*killGrace, func() {
			backstop.Store(true)
			p.abort()
		})
		defer t.Stop()
	}
	var exit *agent.Exit
	startedSent := false
	for {
		kind, b, err := agent.ReadFrame(frames)
		if err != nil {
			break
		}
		switch kind {
		case agent.FrameStarted:
			var st agent.Started
			if json.Unmarshal(b, &st) == nil && !startedSent {
				startedSent = true
				p.started <- st
			}
		case agent.FrameStdout:
			_, _ = p.stdout.Write(b)
		case agent.FrameStderr:
			_, _ = p.stderr.Write(b)
		case agent.FrameExit:
			var e agent.Exit
			if json.Unmarshal(b, &e) == nil {
				exit = &e
			}
		}
	}
	frames.Close()
	execErr := <-execDone
	p.cancel()
	if exit == nil && backstop.Load() {
		exit = &agent.Exit{Code: sandbox.ExitTimeout, TimedOut: true}
	}
	p.finish(exit, execErr, stderrBuf.String())
}

// finish fills the Result from the shepherd's exit, or, without one, from
// what ended the stream.
func (p *process) finish(exit *agent.Exit, execErr error, agentErr string) {
	defer close(p.done)
	defer func() {
		p.i.mu.Lock()
		delete(p.i.procs, p)
		p.i.mu.Unlock()
	}()
	res := sandbox.Result{ID: p.i.id, Backend: p.i.b.Name(), Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	res.DurationMS = float64(time.Since(p.start).Microseconds()) / 1000
	res.Stdout, res.StdoutTruncated = p.stdout.String(), p.stdout.Truncated()
	res.Stderr, res.StderrTruncated = p.stderr.String(), p.stderr.Truncated()
	if exit != nil {
		res.ExitCode, res.Signal = exit.Code, exit.Signal
		res.StdoutTruncated = res.StdoutTruncated || exit.StdoutBytes > int64(len(res.Stdout))
		res.StderrTruncated = res.StderrTruncated || exit.StderrBytes > int64(len(res.Stderr))
		res.Usage = sandbox.Usage{CPUMillis: exit.CPUMillis, PeakMemoryBytes: exit.MaxRSS}
		if exit.TimedOut {
			res.TimedOut, res.ExitCode, res.Signal = true, sandbox.ExitTimeout, "SIGKILL"
		}
		p.res = res
		return
	}
	// No exit: the sandbox ended, or the stream broke. A sandbox whose
	// agent still answers lives on; one that does not is ending, and the
	// Pod's state, once the kubelet reports it, says why.
	var pod *corev1.Pod
	if p.i.answers(pingWait) != nil {
		pod = p.i.ended(diedWait)
	} else {
		p.i.mu.Lock()
		pod = p.i.last
		p.i.mu.Unlock()
	}
	if oomKilled(pod) {
		// The host meets the memory cap by killing gVisor's sentry, the
		// sandbox's kernel: the process and the sandbox are gone.
		res.OOMKilled, res.ExitCode, res.Signal = true, sandbox.ExitOOM, "SIGKILL"
		p.res = res
		return
	}
	res.ExitCode, res.Signal = command.ExitKilled, "SIGKILL"
	p.res = res
	if err := p.i.alive(); err != nil {
		p.err = fmt.Errorf("process %s: %w", p.id, err)
		return
	}
	p.err = fmt.Errorf("process %s: its shepherd ended without an exit status (%v %s): %w", p.id, execErr, agentErr, sandbox.ErrDied)
}

// send writes one frame to the shepherd.
func (p *process) send(kind byte, payload []byte) error {
	p.frames.Lock()
	defer p.frames.Unlock()
	return agent.WriteFrame(p.toAgent, kind, payload)
}

// feed copies r to the process's stdin, then ends it.
func (p *process) feed(r io.Reader) {
	buf := make([]byte, agent.DataChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if p.send(agent.FrameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = p.send(agent.FrameEOF, nil)
			return
		}
	}
}

// abort cuts the exec stream: the shepherd kills the process.
func (p *process) abort() {
	p.cancel()
	p.toAgent.Close()
}

func (p *process) ID() string { return p.id }

// Stdin is the process's stdin pipe, with OpenStdin.
func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Signal sends sig to the process. A SIGKILL that the shepherd does not
// take within killGrace (its stdin is full) cuts the stream instead.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if sig < 1 || sig > 64 {
		return fmt.Errorf("signal %d: %w", sig, sandbox.ErrInvalid)
	}
	kind, payload := agent.FrameSignal, []byte{byte(sig)}
	if sig == syscall.SIGKILL {
		kind, payload = agent.FrameKill, nil
	}
	sent := make(chan error, 1)
	go func() { sent <- p.send(kind, payload) }()
	select {
	case err := <-sent:
		if err != nil && !errors.Is(err, io.ErrClosedPipe) {
			return err
		}
	case <-time.After(killGrace):
		if sig == syscall.SIGKILL {
			p.abort()
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if sig == syscall.SIGKILL {
		go func() {
			select {
			case <-p.done:
			case <-time.After(killGrace):
				p.abort()
			}
		}()
	}
	return nil
}

// Wait waits for the process's exit.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return sandbox.Result{ID: p.i.id, Backend: p.i.b.Name()}, ctx.Err()
	}
}

// stdinWriter is the write end of an OpenStdin process's stdin.
type stdinWriter struct {
	p    *process
	once sync.Once
}

func (w *stdinWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), agent.DataChunk)
		if err := w.p.send(agent.FrameStdin, b[:k]); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

func (w *stdinWriter) Close() error {
	var err error
	w.once.Do(func() { err = w.p.send(agent.FrameEOF, nil) })
	return err
}

// syncBuf is a bytes buffer safe for the exec's writer and one reader.
type syncBuf struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
