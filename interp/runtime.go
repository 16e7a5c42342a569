package interp

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// The runner's source travels in its command line (python3 -c), and the
// node kernel's in the runner's config: no file of either is written into
// the sandbox, where the code could change it for the next start.
var (
	//go:embed runner/runner.py
	runnerPy string
	//go:embed runner/kernel.js
	kernelJS string
)

// Why the events do not travel on the runner's own stdout: the sandbox
// interface promises that ProcessSpec.Stdout receives all output while
// OutputLimit caps only what the Result keeps, but the native backend
// passes on only what it keeps (its CapBuffer tees the kept bytes), so a
// long-lived runner's stream would stop at OutputLimit, and a higher
// limit would make the backend hold every byte of the stream in memory.
// So events go through a relay: a process that makes a FIFO and copies it
// to its stdout (cat), whose budget of bytes is its OutputLimit. Before a
// call that could pass it, the host starts a new relay and the runner
// moves to it between frames; the old relay ends, and with it what the
// backend kept of its output. The memory the backend holds for a context
// stays under one relay's budget, CallLimit plus 8 MiB.

// relayScript makes the FIFO (mode 0600, a fresh random name) and copies
// what the runner writes into it to the relay's stdout.
const relayScript = `umask 077 && mkfifo -- "$1" && exec cat -- "$1"`

// transportBudget is how many bytes one relay carries.
func transportBudget(o Options) int64 { return o.CallLimit + 8<<20 }

// killWait bounds the wait for a killed process's end.
const killWait = 10 * time.Second

// transport is one relay process and the frames read from its stdout.
type transport struct {
	seq    uint64
	path   string
	proc   sandbox.Process
	frames chan frameResult
	quit   chan struct{}
	ended  chan struct{} // the relay process has ended; res is set
	res    sandbox.Result
	used   atomic.Int64 // bytes read
	stop   sync.Once
}

type frameResult struct {
	f    *frame
	size int
	err  error
}

func (c *Context) startTransport(ctx context.Context, gen int, seq uint64) (*transport, error) {
	t := &transport{seq: seq, path: fmt.Sprintf("/tmp/.airlock-interp-%s-%d-%d", c.token, gen, seq),
		frames: make(chan frameResult), quit: make(chan struct{}), ended: make(chan struct{})}
	pr, pw := io.Pipe()
	p, err := c.inst.Start(ctx, sandbox.ProcessSpec{
		Cmd: []string{"sh", "-c", relayScript, "airlock-interp-relay", t.path}, Dir: "/tmp",
		KeepAlive: true, Stdout: pw, OutputLimit: transportBudget(c.opts)})
	if err != nil {
		return nil, fmt.Errorf("start the relay: %w", err)
	}
	t.proc = p
	go t.read(pr, c.opts.FrameLimit)
	go func() {
		t.res, _ = p.Wait(context.Background())
		pw.Close()
		close(t.ended)
	}()
	return t, nil
}

// read parses frames as they come and hands them over one at a time;
// the first error (the end of the stream included) is the last thing it
// hands over.
func (t *transport) read(pr *io.PipeReader, limit int) {
	defer pr.Close()
	for {
		b, err := readFrame(pr, limit)
		fr := frameResult{err: err}
		if err == nil {
			fr.size = len(b) + 4
			t.used.Add(int64(fr.size))
			fr.f, fr.err = parseFrame(b)
		}
		select {
		case t.frames <- fr:
		case <-t.quit:
			return
		}
		if fr.err != nil {
			return
		}
	}
}

// close stops the reader; the relay must be dead or dying.
func (t *transport) close() { t.stop.Do(func() { close(t.quit) }) }

// kill ends the relay and waits for it, within killWait.
func (t *transport) kill() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	_ = t.proc.Signal(ctx, syscall.SIGKILL)
	select {
	case <-t.ended:
	case <-ctx.Done():
	}
	t.close()
}

// generation is one runner process and its current transport.
type generation struct {
	num   int
	proc  sandbox.Process
	stdin io.WriteCloser
	dead  chan struct{} // the runner has ended; res and werr are set
	res   sandbox.Result
	werr  error

	mu     sync.Mutex
	tr     *transport
	runner string
}

func (g *generation) transport() *transport {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tr
}

// signalAll signals the runner and its relay without waiting.
func (g *generation) signalAll(sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if g.proc != nil {
		_ = g.proc.Signal(ctx, sig)
	}
	if t := g.transport(); t != nil {
		_ = t.proc.Signal(ctx, sig)
	}
}

// unusable says why g cannot take the next call, or "".
func (g *generation) unusable() string {
	if g == nil {
		return "the context had no working runner"
	}
	select {
	case <-g.dead:
		return "the runner ended between calls (" + g.exitDesc() + ")"
	default:
	}
	select {
	case fr := <-g.transport().frames:
		if fr.err != nil && !errors.Is(fr.err, ErrProtocol) {
			return "its transport ended between calls"
		}
		if fr.err != nil {
			return "its channel broke the protocol between calls: " + fr.err.Error()
		}
		return "a " + fr.f.Type + " frame came between calls, when none may"
	default:
	}
	return ""
}

// exitDesc says how the runner ended; g.dead must be closed.
func (g *generation) exitDesc() string {
	return exitDesc(g.res, g.werr)
}

func exitDesc(res sandbox.Result, err error) string {
	var parts []string
	switch {
	case err != nil:
		parts = append(parts, err.Error())
	case res.OOMKilled:
		parts = append(parts, "killed for memory")
	case res.Signal != "":
		parts = append(parts, "killed by "+res.Signal)
	default:
		parts = append(parts, fmt.Sprintf("exit status %d", res.ExitCode))
	}
	if res.PidsLimitHit {
		parts = append(parts, "the pids cap was hit")
	}
	if tail := lastLine(res.Stderr); tail != "" {
		parts = append(parts, "it said: "+tail)
	}
	return strings.Join(parts, "; ")
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// runnerConfig is the runner's argument.
type runnerConfig struct {
	Language    string `json:"language"`
	Runner      string `json:"runner,omitempty"`
	FrameLimit  int    `json:"frame_limit"`
	OutputLimit int64  `json:"output_limit"`
	Transport   string `json:"transport"`
	KernelJS    string `json:"kernel_js,omitempty"`
}

// startGeneration starts a runner and its first relay, waits for it to
// say it is ready, and runs the preload.
func (c *Context) startGeneration(ctx context.Context) (_ *generation, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	c.gens++
	g := &generation{num: c.gens, dead: make(chan struct{})}
	defer func() {
		if err != nil {
			c.kill(g)
		}
	}()
	t, err := c.startTransport(ctx, g.num, 1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	g.tr = t
	cfg := runnerConfig{Language: c.opts.Language, Runner: c.opts.Runner, FrameLimit: c.opts.FrameLimit,
		OutputLimit: c.opts.OutputLimit, Transport: t.path}
	if c.opts.Language == JavaScript {
		cfg.KernelJS = kernelJS
	}
	arg, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	p, err := c.inst.Start(ctx, sandbox.ProcessSpec{
		Cmd: []string{"python3", "-c", runnerPy, "airlock-interp", string(arg)},
		Env: c.opts.Env, Dir: c.opts.Cwd, OpenStdin: true, KeepAlive: true, OutputLimit: runnerOutputLimit})
	if err != nil {
		return nil, fmt.Errorf("%w: start the runner: %w", ErrStart, err)
	}
	g.proc, g.stdin = p, p.Stdin()
	go func() {
		g.res, g.werr = p.Wait(context.Background())
		close(g.dead)
	}()
	f, err := c.expect(ctx, g, t, "attached")
	if err == nil && f.Seq != 1 {
		err = fmt.Errorf("%w: the runner attached transport %d, want 1", ErrStart, f.Seq)
	}
	if err == nil {
		f, err = c.expect(ctx, g, t, "ready")
	}
	if err != nil {
		return nil, err
	}
	if f.Language != c.opts.Language {
		return nil, fmt.Errorf("%w: the runner says it runs %.64q, want %s", ErrStart, f.Language, c.opts.Language)
	}
	g.runner = strings.ToValidUTF8(f.Runner, "?")
	if c.opts.Preload == "" {
		return g, nil
	}
	c.calls++
	var x Execution
	out := c.execute(ctx, g, c.calls, c.opts.Preload, true, 0, &x, func(ev Event) { x.add(ev, c.opts.OutputLimit) })
	x.finish()
	switch {
	case out.fail != nil:
		return nil, fmt.Errorf("%w: preload: %s: %s", ErrStart, out.fail.name, out.fail.reason)
	case out.ctxErr != nil:
		return nil, fmt.Errorf("%w: preload: %w", ErrStart, out.ctxErr)
	case x.Error != nil:
		return nil, fmt.Errorf("%w: preload: %s: %s%s", ErrStart, x.Error.Name, x.Error.Value, tracebackTail(x.Error.Traceback))
	}
	return g, nil
}

func tracebackTail(tb []string) string {
	if len(tb) == 0 {
		return ""
	}
	return " (" + lastLine(strings.Join(tb, "\n")) + ")"
}

// expect waits for the next frame on t and wants it to be of type typ.
func (c *Context) expect(ctx context.Context, g *generation, t *transport, typ string) (*frame, error) {
	dead, ended := g.dead, t.ended
	var grace <-chan time.Time
	for {
		select {
		case fr := <-t.frames:
			switch {
			case fr.err != nil && errors.Is(fr.err, ErrProtocol):
				return nil, fmt.Errorf("%w: waiting for %s: %w", ErrStart, typ, fr.err)
			case fr.err != nil:
				return nil, fmt.Errorf("%w: the transport ended while waiting for %s: %s", ErrStart, typ, c.lostDesc(g, t))
			case fr.f.Type != typ:
				return nil, fmt.Errorf("%w: a %s frame came, want %s: %w", ErrStart, fr.f.Type, typ, ErrProtocol)
			}
			return fr.f, nil
		case <-dead:
			// what it wrote before it ended may still be on its way
			dead = nil
			grace = time.After(time.Second)
		case <-grace:
			return nil, fmt.Errorf("%w: the runner ended while waiting for %s (%s)", ErrStart, typ, g.exitDesc())
		case <-ended:
			// the frames channel tells the rest
			ended = nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for %s: %w", ErrStart, typ, ctx.Err())
		}
	}
}

// lostDesc says why t ended: the runner's end, or the relay's.
func (c *Context) lostDesc(g *generation, t *transport) string {
	select {
	case <-g.dead:
		return "the runner ended (" + g.exitDesc() + ")"
	case <-time.After(2 * time.Second):
	}
	select {
	case <-t.ended:
		return "the relay ended (" + exitDesc(t.res, nil) + ")"
	default:
		return "the relay's output stopped"
	}
}

// failure is why a call ended without its end frame: the runner must go.
type failure struct{ name, reason string }

// outcome is how execute ended.
type outcome struct {
	count     int
	fail      *failure
	interrupt string // why SIGINT was sent, if it was
	ctxErr    error
}

// execute sends one call and follows it to its end frame, interrupting it
// at its timeout and giving up on the runner when it dies, hangs past the
// grace period or breaks the protocol.
func (c *Context) execute(ctx context.Context, g *generation, id uint64, code string, silent bool,
	timeout time.Duration, x *Execution, emit func(Event)) (out outcome) {
	req, err := appendFrame(nil, map[string]any{"op": "run", "id": id, "code": code, "silent": silent})
	if err != nil {
		out.fail = &failure{ErrorProtocol, "the call cannot be encoded: " + err.Error()}
		return out
	}
	t := g.transport()
	written := make(chan error, 1)
	go func() {
		_, err := g.stdin.Write(req)
		written <- err
	}()
	var timeoutC, graceC, deadGrace <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		timeoutC = tm.C
	}
	done, dead := ctx.Done(), g.dead
	var callBytes int64
	interrupt := func(why string) {
		if out.interrupt != "" {
			return
		}
		out.interrupt = why
		x.Interrupted = true
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.proc.Signal(sctx, syscall.SIGINT)
		cancel()
		gt := time.NewTimer(c.opts.Grace)
		graceC = gt.C
	}
	protocol := func(format string, a ...any) outcome {
		out.fail = &failure{ErrorProtocol, "the runner's channel broke the protocol: " + fmt.Sprintf(format, a...)}
		return out
	}
	for {
		select {
		case fr := <-t.frames:
			if fr.err != nil {
				if errors.Is(fr.err, ErrProtocol) {
					return protocol("%v", fr.err)
				}
				out.fail = &failure{ErrorDied, "the context's transport ended: " + c.lostDesc(g, t)}
				return out
			}
			if callBytes += int64(fr.size); callBytes > c.opts.CallLimit {
				return protocol("the call's frames passed its limit of %d bytes", c.opts.CallLimit)
			}
			f := fr.f
			switch f.Type {
			case "fatal":
				out.fail = &failure{ErrorDied, "the " + c.opts.Language + " kernel ended: " + strings.ToValidUTF8(lastLine(f.Reason), "?")}
				return out
			case EventStdout, EventStderr, EventResult, EventDisplay, EventError, EventEnd:
				if f.ID != id {
					return protocol("a frame of call %d came during call %d", f.ID, id)
				}
			default:
				return protocol("a %s frame came during a call", f.Type)
			}
			if f.Type == EventEnd {
				out.count = int(f.ExecutionCount)
				return out
			}
			emit(Event{Type: f.Type, Text: f.Text, Data: f.Data, Name: f.Name, Value: f.Value, Traceback: f.Traceback})
		case err := <-written:
			written = nil
			if err != nil {
				// the runner does not read: it is gone, or going
				dead, deadGrace = nil, time.After(2*time.Second)
			}
		case <-dead:
			// frames it wrote before it ended may still be on their way
			dead, deadGrace = nil, time.After(2*time.Second)
		case <-deadGrace:
			select {
			case <-g.dead:
				out.fail = &failure{ErrorDied, "the runner ended during the call (" + g.exitDesc() + ")"}
			default:
				out.fail = &failure{ErrorDied, "the runner stopped reading its requests"}
			}
			return out
		case <-timeoutC:
			interrupt(fmt.Sprintf("the call ran past its timeout of %v", timeout))
		case <-done:
			done = nil
			out.ctxErr = ctx.Err()
			interrupt("the caller's context ended (" + ctx.Err().Error() + ")")
		case <-graceC:
			out.fail = &failure{ErrorTimeout, fmt.Sprintf("%s and did not stop within %v of SIGINT", out.interrupt, c.opts.Grace)}
			return out
		}
	}
}

// rotate moves g's runner to a fresh relay between calls.
func (c *Context) rotate(ctx context.Context, g *generation) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	old := g.transport()
	nt, err := c.startTransport(ctx, g.num, old.seq+1)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			nt.kill()
		}
	}()
	req, err := appendFrame(nil, map[string]any{"op": "attach", "path": nt.path, "seq": nt.seq})
	if err != nil {
		return err
	}
	if _, err := g.stdin.Write(req); err != nil {
		return err
	}
	f, err := c.expect(ctx, g, old, "detach")
	if err == nil && f.Seq != nt.seq {
		err = fmt.Errorf("detach from transport %d, want %d: %w", f.Seq, nt.seq, ErrProtocol)
	}
	if err == nil {
		f, err = c.expect(ctx, g, nt, "attached")
	}
	if err == nil && f.Seq != nt.seq {
		err = fmt.Errorf("attached transport %d, want %d: %w", f.Seq, nt.seq, ErrProtocol)
	}
	if err != nil {
		return err
	}
	ok = true
	g.mu.Lock()
	g.tr = nt
	g.mu.Unlock()
	old.kill()
	return nil
}

// kill ends g's runner and relay and waits for both, within killWait.
func (c *Context) kill(g *generation) {
	if g == nil {
		return
	}
	g.signalAll(syscall.SIGKILL)
	if g.proc != nil {
		select {
		case <-g.dead:
		case <-time.After(killWait):
		}
	}
	g.transport().kill()
}
