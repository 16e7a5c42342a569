package interp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Languages a context can run.
const (
	Python     = "python"
	JavaScript = "javascript"
	Bash       = "bash"
)

// MIME types that bundles carry. Binary types (PNG, JPEG) are base64.
const (
	MIMEText     = "text/plain"
	MIMEHTML     = "text/html"
	MIMEMarkdown = "text/markdown"
	MIMELaTeX    = "text/latex"
	MIMEPNG      = "image/png"
	MIMEJPEG     = "image/jpeg"
	MIMESVG      = "image/svg+xml"
	MIMEJSON     = "application/json"
)

// Event types.
const (
	// EventStdout and EventStderr carry output as it comes (Text).
	EventStdout = "stdout"
	EventStderr = "stderr"
	// EventResult carries the value of the call's last expression as a
	// MIME bundle (Data).
	EventResult = "result"
	// EventDisplay carries a bundle shown during the call: display(), a
	// matplotlib figure shown or left open.
	EventDisplay = "display"
	// EventError carries an error: Name, Value and Traceback.
	EventError = "error"
	// EventEnd is the last event of every call: ExecutionCount and
	// DurationMS, and Reason when the call was interrupted.
	EventEnd = "end"
	// EventRestarted says that the context was restarted and why (Reason);
	// its state (variables, imports, functions) is gone.
	EventRestarted = "restarted"
)

// Names of the errors the host itself reports in an error event.
const (
	// ErrorTimeout: the call ran past its timeout and did not stop on
	// SIGINT within the grace period; the context was restarted.
	ErrorTimeout = "Timeout"
	// ErrorDied: the runner or its kernel ended during the call (killed for
	// memory, exit, a crash); the context was restarted.
	ErrorDied = "ContextDied"
	// ErrorProtocol: the runner's channel carried a frame that broke the
	// protocol (forged, garbled, too large); the context was restarted.
	ErrorProtocol = "ProtocolError"
	// ErrorExitCode is what a bash call that exits non-zero reports, with
	// the status as the Value.
	ErrorExitCode = "ExitCode"
)

// Errors of the Go API. Failures of the code itself are events, not errors.
var (
	// ErrClosed means the context was closed.
	ErrClosed = errors.New("interpreter context closed")
	// ErrStart means a runner did not start, or its preload failed.
	ErrStart = errors.New("interpreter context did not start")
)

// Options configure a context.
type Options struct {
	// Name names the context (its ID); empty means a random name.
	Name string
	// Language is Python (the default), JavaScript or Bash.
	Language string
	// Runner picks the Python kernel: "" (or "auto") takes IPython where
	// the image has it and the stdlib kernel elsewhere; "stdlib" always
	// takes the stdlib kernel.
	Runner string
	// Cwd is the working folder; default the sandbox's (/workspace).
	Cwd string
	// Env adds to the sandbox's environment.
	Env map[string]string
	// Preload is code run once at each start, before the first call, such
	// as "import pandas, numpy, matplotlib.pyplot". It does not count as a
	// call; if it fails, Start fails.
	Preload string
	// OutputLimit caps the stdout and stderr text one call keeps,
	// together; what is over it is dropped with a truncation note. Zero
	// means DefaultOutputLimit.
	OutputLimit int64
	// FrameLimit caps one frame of the protocol, and so one event (a PNG
	// is base64 in one frame). Zero means DefaultFrameLimit; the least is
	// 64 KiB.
	FrameLimit int
	// CallLimit caps the frames of one call together; a call over it is a
	// protocol violation. Zero means twice FrameLimit.
	CallLimit int64
	// Grace is how long an interrupted call has to end before the context
	// is restarted. Zero means DefaultGrace plus as long as the runner
	// took to start (to its ready frame; the preload is not counted): a
	// runner slow to start, on a loaded host or in a machine under TCG,
	// is as slow to stop, and losing its state for that is worse than
	// waiting.
	Grace time.Duration
	// StartTimeout bounds one start of the runner, preload included. Zero
	// means DefaultStartTimeout.
	StartTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultOutputLimit  = 1 << 20
	DefaultFrameLimit   = 16 << 20
	DefaultGrace        = 3 * time.Second
	DefaultStartTimeout = 2 * time.Minute
	minFrameLimit       = 64 << 10
	maxEvents           = 10000 // events an Execution keeps
	outputSlack         = 256   // room for the runner's truncation note
	runnerOutputLimit   = 64 << 10
)

func (o Options) normalize() (Options, error) {
	switch o.Language {
	case "":
		o.Language = Python
	case Python, JavaScript, Bash:
	default:
		return o, fmt.Errorf("language %q: want python, javascript or bash: %w", o.Language, sandbox.ErrInvalid)
	}
	switch o.Runner {
	case "", "auto", "stdlib":
	default:
		return o, fmt.Errorf("runner %q: want auto or stdlib: %w", o.Runner, sandbox.ErrInvalid)
	}
	if o.OutputLimit == 0 {
		o.OutputLimit = DefaultOutputLimit
	}
	if o.FrameLimit == 0 {
		o.FrameLimit = DefaultFrameLimit
	}
	if o.OutputLimit < 1 || o.OutputLimit > 1<<30 {
		return o, fmt.Errorf("output limit %d out of range (1B to 1GiB): %w", o.OutputLimit, sandbox.ErrInvalid)
	}
	if o.FrameLimit < minFrameLimit || o.FrameLimit > 1<<30 {
		return o, fmt.Errorf("frame limit %d out of range (64KiB to 1GiB): %w", o.FrameLimit, sandbox.ErrInvalid)
	}
	if o.CallLimit == 0 {
		o.CallLimit = 2 * int64(o.FrameLimit)
	}
	if o.CallLimit < int64(o.FrameLimit) || o.CallLimit > 1<<30 {
		return o, fmt.Errorf("call limit %d out of range (FrameLimit to 1GiB): %w", o.CallLimit, sandbox.ErrInvalid)
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.Grace < 0 || o.StartTimeout < 0 {
		return o, fmt.Errorf("negative grace or start timeout: %w", sandbox.ErrInvalid)
	}
	for k, v := range o.Env {
		if err := sandbox.CheckEnv(k, v); err != nil {
			return o, err
		}
	}
	if o.Name == "" {
		o.Name = "ctx-" + randomHex(6)
	}
	return o, nil
}

// Event is one thing a call reported. Type says which fields are set.
type Event struct {
	Type string `json:"type"`
	// Text is the output of stdout and stderr events.
	Text string `json:"text,omitempty"`
	// Data is the MIME bundle of result and display events: MIME type to
	// content, base64 for binary types.
	Data map[string]string `json:"data,omitempty"`
	// Name, Value and Traceback describe an error event.
	Name      string   `json:"name,omitempty"`
	Value     string   `json:"value,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
	// ExecutionCount and DurationMS are set on the end event.
	ExecutionCount int     `json:"execution_count,omitempty"`
	DurationMS     float64 `json:"duration_ms,omitempty"`
	// Reason says why a context restarted, or why a call was interrupted.
	Reason string `json:"reason,omitempty"`
}

// Execution is what one call gave back.
type Execution struct {
	// Events are the call's events in order, the end event last, up to
	// 10000 of them (EventsTruncated says when more came).
	Events []Event `json:"events"`
	// Results are the bundles of the result events: the value of the last
	// expression, when there was one.
	Results []map[string]string `json:"results,omitempty"`
	// Stdout and Stderr are the call's output, joined.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Error is the call's last error event, or nil.
	Error *Event `json:"error,omitempty"`
	// ExecutionCount numbers the call within the context's current
	// runner (from 1; it starts again after a restart).
	ExecutionCount int `json:"execution_count"`
	// Duration is the call's wall time, measured by the host.
	Duration time.Duration `json:"duration_ns"`
	// Interrupted: the call ran past its timeout (or its context ended)
	// and was sent SIGINT.
	Interrupted bool `json:"interrupted,omitempty"`
	// Restarted: the context was restarted during or just before the
	// call; the state of earlier calls is gone.
	Restarted bool `json:"restarted,omitempty"`
	// OutputTruncated: stdout and stderr were cut at OutputLimit.
	OutputTruncated bool `json:"output_truncated,omitempty"`
	// EventsTruncated: more events came than Events keeps.
	EventsTruncated bool `json:"events_truncated,omitempty"`

	outUsed        int64
	stdout, stderr []byte
}

// Context is one stateful interpreter in a sandbox: a runner process,
// started KeepAlive, whose variables, imports and functions persist
// between calls. Calls are serialized. A context survives its runner: a
// runner that dies, hangs or breaks the protocol is replaced by a fresh
// one, and the call that saw it says so.
type Context struct {
	inst  sandbox.Instance
	opts  Options
	token string // names the context's transports and marks its runner's command line

	lock   chan struct{} // one holder at a time: Run, Restart, Close
	closed atomic.Bool
	calls  uint64 // call ids, never reused; under lock
	gens   int    // runner generations started; under lock

	mu  sync.Mutex
	gen *generation // nil while there is no working runner
}

// Start starts a context in inst: the runner, its transport and the
// preload. It returns once the context takes calls.
func Start(ctx context.Context, inst sandbox.Instance, opts Options) (*Context, error) {
	opts, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	c := &Context{inst: inst, opts: opts, token: randomHex(8), lock: make(chan struct{}, 1)}
	g, err := c.startGeneration(ctx)
	if err != nil {
		return nil, err
	}
	c.setGen(g)
	return c, nil
}

// ID is the context's name.
func (c *Context) ID() string { return c.opts.Name }

// Language is the context's language.
func (c *Context) Language() string { return c.opts.Language }

// Runner describes the kernel the runner took, such as "ipython 8.5.0
// (matplotlib-inline)", "stdlib", "node v20.20.2" or "bash 5.2.15"; ""
// while no runner works.
func (c *Context) Runner() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == nil {
		return ""
	}
	return c.gen.runner
}

// Token is the random mark of the context: its runner's command line holds
// "airlock-interp" and it, so that a host tool can find the runner's
// process.
func (c *Context) Token() string { return c.token }

func (c *Context) setGen(g *generation) {
	c.mu.Lock()
	c.gen = g
	c.mu.Unlock()
}

func (c *Context) acquire(ctx context.Context) error {
	select {
	case c.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Context) release() { <-c.lock }

// Run runs code in the context and waits for it to end. Each event is
// passed to onEvent (which may be nil) as it comes, from Run's goroutine,
// and kept in the Execution. A timeout of 0 means none; at the timeout,
// or when ctx ends, the runner gets SIGINT, and if the call does not end
// within the grace period the context is restarted. Failures of the code
// are events (Execution.Error); Run's error is for what the context could
// not do: closed, its sandbox gone, a restart that failed, or ctx's error
// once ctx ended.
func (c *Context) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(Event)) (x Execution, err error) {
	if len(code) > c.opts.FrameLimit {
		return x, fmt.Errorf("code of %d bytes is over the frame limit of %d: %w", len(code), c.opts.FrameLimit, sandbox.ErrInvalid)
	}
	if err := c.acquire(ctx); err != nil {
		return x, err
	}
	defer c.release()
	if c.closed.Load() {
		return x, ErrClosed
	}
	emit := func(ev Event) {
		if ev, ok := x.add(ev, c.opts.OutputLimit); ok && onEvent != nil {
			onEvent(ev)
		}
	}
	defer x.finish()
	g := c.currentGen()
	if why := g.unusable(); why != "" {
		if err := c.replace(ctx, g, why, &x, emit); err != nil {
			return x, err
		}
		g = c.currentGen()
	}
	c.calls++
	start := time.Now()
	out := c.execute(ctx, g, c.calls, code, false, timeout, &x, emit)
	x.Duration = time.Since(start)
	if out.fail != nil {
		emit(Event{Type: EventError, Name: out.fail.name, Value: out.fail.reason})
		if c.closed.Load() {
			c.kill(g)
			c.setGen(nil)
			return x, ErrClosed
		}
		if err := c.replace(ctx, g, out.fail.reason, &x, emit); err != nil {
			return x, err
		}
	}
	end := Event{Type: EventEnd, ExecutionCount: out.count, DurationMS: float64(x.Duration.Microseconds()) / 1000, Reason: out.interrupt}
	x.ExecutionCount = out.count
	emit(end)
	if out.ctxErr != nil {
		return x, out.ctxErr
	}
	return x, nil
}

// Restart replaces the runner with a fresh one (the preload runs again);
// the state of earlier calls is gone.
func (c *Context) Restart(ctx context.Context) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.release()
	if c.closed.Load() {
		return ErrClosed
	}
	if g := c.currentGen(); g != nil {
		c.kill(g)
		c.setGen(nil)
	}
	g, err := c.startGeneration(ctx)
	if err != nil {
		return err
	}
	c.setGen(g)
	return nil
}

// Close ends the context: a call that runs is cut short (it returns
// ErrClosed), the runner and its transport are killed. The sandbox is
// left as it is. Close is idempotent.
func (c *Context) Close(ctx context.Context) error {
	c.closed.Store(true)
	c.mu.Lock()
	g := c.gen
	c.mu.Unlock()
	if g != nil {
		g.signalAll(syscall.SIGKILL)
	}
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.release()
	if g := c.currentGen(); g != nil {
		c.kill(g)
		c.setGen(nil)
	}
	return nil
}

func (c *Context) currentGen() *generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// replace kills g (which may be nil) and starts a fresh runner, reporting
// it as a restarted event; the Execution is marked Restarted.
func (c *Context) replace(ctx context.Context, g *generation, why string, x *Execution, emit func(Event)) error {
	if g != nil {
		c.kill(g)
	}
	c.setGen(nil)
	sctx := ctx
	if ctx.Err() != nil {
		// a call whose context ended still leaves a working context behind
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), c.opts.StartTimeout)
		defer cancel()
	}
	if c.closed.Load() {
		return ErrClosed
	}
	ng, err := c.startGeneration(sctx)
	if err != nil {
		return fmt.Errorf("restart after %s: %w", why, err)
	}
	if c.closed.Load() {
		// Close came while it started; Close's kill may have missed it
		c.kill(ng)
		return ErrClosed
	}
	c.setGen(ng)
	x.Restarted = true
	emit(Event{Type: EventRestarted, Reason: why + "; the " + c.opts.Language +
		" context was restarted and the state of earlier calls (variables, imports, functions) is gone"})
	return nil
}

// add keeps ev in the Execution, within the output budget and the event
// count, and returns it as it is to be passed on (output may be cut);
// false means it is over the output budget and dropped.
func (x *Execution) add(ev Event, outLimit int64) (Event, bool) {
	switch ev.Type {
	case EventStdout, EventStderr:
		room := outLimit + outputSlack - x.outUsed
		if room <= 0 {
			x.OutputTruncated = true
			return ev, false
		}
		if int64(len(ev.Text)) > room {
			ev.Text = strings.ToValidUTF8(ev.Text[:room], "") + fmt.Sprintf("\n[airlock: output truncated at %d bytes]\n", outLimit)
			x.OutputTruncated = true
			x.outUsed = outLimit + outputSlack
		} else {
			x.outUsed += int64(len(ev.Text))
		}
		if x.outUsed > outLimit {
			// the runner cuts at the limit and adds its note
			x.OutputTruncated = true
		}
		if ev.Type == EventStdout {
			x.stdout = append(x.stdout, ev.Text...)
		} else {
			x.stderr = append(x.stderr, ev.Text...)
		}
	case EventResult:
		x.Results = append(x.Results, ev.Data)
	case EventError:
		e := ev
		x.Error = &e
	}
	if len(x.Events) >= maxEvents && ev.Type != EventEnd {
		x.EventsTruncated = true
		return ev, true
	}
	x.Events = append(x.Events, ev)
	return ev, true
}

// finish fills Stdout and Stderr from what add kept.
func (x *Execution) finish() {
	x.Stdout, x.Stderr = string(x.stdout), string(x.stderr)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
