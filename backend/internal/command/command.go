// Package command holds what the container backends (docker, gvisor)
// share about one command: checking a ProcessSpec and building its
// environment, the shell that wraps it, keeping capped copies of its
// output, the helper that reaps what it left, and reading its exit
// status.
package command

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// DefaultEnv is what every command gets before the policy's and the
// request's variables; nothing of the host's environment enters.
var DefaultEnv = map[string]string{
	"PATH": "/usr/local/bin:/usr/bin:/bin",
	"HOME": "/tmp",
	"LANG": "C.UTF-8",
}

// WorkDir is the default working folder inside.
const WorkDir = "/workspace"

// Spec is a checked command, ready to run.
type Spec struct {
	Argv []string
	// Env is sorted "K=V" pairs.
	Env []string
	Dir string
	// Timeout is the wall time the process may run; 0 means no limit (a
	// KeepAlive process without a timeout of its own).
	Timeout time.Duration
	// OutputLimit is what the Result keeps of stdout and of stderr, each.
	OutputLimit int64
}

// Check validates req against the policy and builds the command's
// environment from DefaultEnv, the extras in order (the image's own
// variables, the backend's such as the egress proxy's), the policy's Env
// and the request's Env, later ones winning. Errors wrap
// sandbox.ErrInvalid.
func Check(pol sandbox.Policy, req sandbox.ProcessSpec, extras ...map[string]string) (Spec, error) {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return Spec{}, fmt.Errorf("empty command: %w", sandbox.ErrInvalid)
	}
	for _, a := range req.Cmd {
		if strings.ContainsRune(a, 0) {
			return Spec{}, fmt.Errorf("command argument contains NUL: %w", sandbox.ErrInvalid)
		}
	}
	env := map[string]string{}
	layers := append(append([]map[string]string{DefaultEnv}, extras...), pol.Env, req.Env)
	for _, m := range layers {
		for k, v := range m {
			if err := sandbox.CheckEnv(k, v); err != nil {
				return Spec{}, err
			}
			env[k] = v
		}
	}
	timeout := time.Duration(pol.Limits.Timeout)
	if req.KeepAlive {
		timeout = 0
	}
	if req.Timeout != 0 {
		timeout = time.Duration(req.Timeout)
		if timeout < 0 || timeout > 24*time.Hour {
			return Spec{}, fmt.Errorf("timeout %v out of range: %w", timeout, sandbox.ErrInvalid)
		}
	}
	limit := pol.Limits.OutputBytes
	if req.OutputLimit != 0 {
		limit = req.OutputLimit
		if limit < 0 || limit > 1<<30 {
			return Spec{}, fmt.Errorf("output limit %d out of range: %w", limit, sandbox.ErrInvalid)
		}
	}
	if req.Stdin != nil && req.OpenStdin {
		return Spec{}, fmt.Errorf("give either Stdin or OpenStdin, not both: %w", sandbox.ErrInvalid)
	}
	dir := req.Dir
	if dir == "" {
		dir = WorkDir
	}
	if !strings.HasPrefix(dir, "/") {
		return Spec{}, fmt.Errorf("working folder %q must be absolute: %w", dir, sandbox.ErrInvalid)
	}
	return Spec{Argv: req.Cmd, Env: sortedPairs(env), Dir: dir, Timeout: timeout, OutputLimit: limit}, nil
}

func sortedPairs(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// CapBuffer keeps the first max bytes written to it and counts the rest;
// it never fails a write, so the writer is never blocked or broken by it.
// What it keeps is also passed on to Tee, if set, as it comes; a Tee that
// fails is dropped.
type CapBuffer struct {
	mu        sync.Mutex
	max       int64
	buf       bytes.Buffer
	total     int64
	tee       io.Writer
	teeFailed bool
}

// NewCapBuffer returns a buffer that keeps max bytes and tees them to tee
// (which may be nil).
func NewCapBuffer(max int64, tee io.Writer) *CapBuffer {
	return &CapBuffer{max: max, tee: tee}
}

// Write keeps what fits and reports every byte as written.
func (c *CapBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	room := c.max - int64(c.buf.Len())
	if room <= 0 {
		return len(p), nil
	}
	kept := p[:min(int64(len(p)), room)]
	c.buf.Write(kept)
	if c.tee != nil && !c.teeFailed {
		if _, err := c.tee.Write(kept); err != nil {
			c.teeFailed = true
		}
	}
	return len(p), nil
}

// String is what was kept.
func (c *CapBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// Full tells whether the buffer keeps nothing more: what comes now is
// only counted.
func (c *CapBuffer) Full() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.buf.Len()) >= c.max
}

// Discarded counts n bytes that were written past the cap without
// passing through Write (see Drain).
func (c *CapBuffer) Discarded(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += n
}

// Truncated reports whether more was written than kept.
func (c *CapBuffer) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total > int64(c.buf.Len())
}

// ContextReader returns a reader of r that fails with ctx's error once
// ctx ends, so that a copy from r stops.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return contextReader{ctx, r} }

type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// ExitKilled is the exit status of a command killed with SIGKILL.
const ExitKilled = 128 + 9

// SignalOf names the signal that an exit status above 128 stands for, as
// shells and container runtimes report a command killed by a signal; ""
// for other statuses. A command that itself exits with such a status
// cannot be told apart.
func SignalOf(status int) string {
	if status <= 128 || status > 128+64 {
		return ""
	}
	return unix.SignalName(unix.Signal(status - 128))
}
