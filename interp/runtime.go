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

// errRelay means a relay could not be started when the runner asked.
var errRelay = errors.New("no relay")

// generation is one runner process and the relays that carry its events.
type generation struct {
	num    int
	proc   sandbox.Process
	stdin  io.WriteCloser
	dead   chan struct{} // the runner has ended; res and werr are set
	res    sandbox.Result
	werr   error
	frames chan frameResult // from follow
	quit   chan struct{}    // closed by kill
	runner string
	grace  time.Duration // how long an interrupted call has to end

	mu     sync.Mutex
	trs    []*transport // relays alive
	killed bool
}

func newGeneration(num int) *generation {
	return &generation{num: num, dead: make(chan struct{}), frames: make(chan frameResult), quit: make(chan struct{})}
}

// addTransport records a relay, unless g was killed.
func (g *generation) addTransport(t *transport) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.killed {
		return false
	}
	g.trs = append(g.trs, t)
	return true
}

func (g *generation) dropTransport(t *transport) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.trs {
		if x == t {
			g.trs = append(g.trs[:i], g.trs[i+1:]...)
			return
		}
	}
}

// signalAll signals the runner and its relays without waiting.
func (g *generation) signalAll(sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if g.proc != nil {
		_ = g.proc.Signal(ctx, sig)
	}
	g.mu.Lock()
	trs := append([]*transport(nil), g.trs...)
	g.mu.Unlock()
	for _, t := range trs {
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
	case fr := <-g.frames:
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
	Language        string `json:"language"`
	Runner          string `json:"runner,omitempty"`
	FrameLimit      int    `json:"frame_limit"`
	OutputLimit     int64  `json:"output_limit"`
	CallLimit       int64  `json:"call_limit"`
	TransportPrefix string `json:"transport_prefix"`
	TransportLimit  int64  `json:"transport_limit"`
	KernelJS        string `json:"kernel_js,omitempty"`
}

// startGeneration starts a runner and its first relay, waits for it to
// say it is ready, and runs the preload.
func (c *Context) startGeneration(ctx context.Context) (_ *generation, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	c.gens++
	g := newGeneration(c.gens)
	defer func() {
		if err != nil {
			c.kill(g)
		}
	}()
	t, err := c.startTransport(ctx, g.num, 1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	g.addTransport(t)
	go c.follow(g, t)
	cfg := runnerConfig{Language: c.opts.Language, Runner: c.opts.Runner, FrameLimit: c.opts.FrameLimit,
		OutputLimit: c.opts.OutputLimit, CallLimit: c.opts.CallLimit,
		TransportPrefix: c.transportPrefix(g.num), TransportLimit: transportLimit(c.opts)}
	if c.opts.Language == JavaScript {
		cfg.KernelJS = kernelJS
	}
	arg, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	began := time.Now()
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
	f, err := c.expect(ctx, g, "ready")
	if err != nil {
		return nil, err
	}
	if f.Language != c.opts.Language {
		return nil, fmt.Errorf("%w: the runner says it runs %.64q, want %s", ErrStart, f.Language, c.opts.Language)
	}
	g.runner = strings.ToValidUTF8(f.Runner, "?")
	if g.grace = c.opts.Grace; g.grace == 0 {
		g.grace = DefaultGrace + time.Since(began).Round(time.Millisecond)
	}
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

// expect waits for g's next frame and wants it to be of type typ.
func (c *Context) expect(ctx context.Context, g *generation, typ string) (*frame, error) {
	dead := g.dead
	var grace <-chan time.Time
	for {
		select {
		case fr := <-g.frames:
			switch {
			case fr.err != nil && errors.Is(fr.err, ErrProtocol):
				return nil, fmt.Errorf("%w: waiting for %s: %w", ErrStart, typ, fr.err)
			case fr.err != nil:
				return nil, fmt.Errorf("%w: the transport ended while waiting for %s: %s", ErrStart, typ, c.lostDesc(g, fr.err))
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
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for %s: %w", ErrStart, typ, ctx.Err())
		}
	}
}

// lostDesc says why g's frames stopped with err (not a protocol error):
// the runner ended, or a relay did.
func (c *Context) lostDesc(g *generation, err error) string {
	if errors.Is(err, errRelay) {
		return err.Error()
	}
	select {
	case <-g.dead:
		return "the runner ended (" + g.exitDesc() + ")"
	case <-time.After(2 * time.Second):
		return "its relay ended"
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
		gt := time.NewTimer(g.grace)
		graceC = gt.C
	}
	protocol := func(format string, a ...any) outcome {
		out.fail = &failure{ErrorProtocol, "the runner's channel broke the protocol: " + fmt.Sprintf(format, a...)}
		return out
	}
	for {
		select {
		case fr := <-g.frames:
			if fr.err != nil {
				if errors.Is(fr.err, ErrProtocol) {
					return protocol("%v", fr.err)
				}
				out.fail = &failure{ErrorDied, "the context's transport ended: " + c.lostDesc(g, fr.err)}
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
			out.fail = &failure{ErrorTimeout, fmt.Sprintf("%s and did not stop within %v of SIGINT", out.interrupt, g.grace)}
			return out
		}
	}
}

// kill ends g's runner and relays and waits for them, within killWait.
func (c *Context) kill(g *generation) {
	if g == nil {
		return
	}
	g.mu.Lock()
	if !g.killed {
		g.killed = true
		close(g.quit)
	}
	g.mu.Unlock()
	g.signalAll(syscall.SIGKILL)
	if g.proc != nil {
		select {
		case <-g.dead:
		case <-time.After(killWait):
		}
	}
	g.mu.Lock()
	trs := g.trs
	g.trs = nil
	g.mu.Unlock()
	for _, t := range trs {
		t.kill()
	}
}
