package tools

import (
	"context"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// Sandbox is what the tools need of a sandbox session. Paths are absolute
// inside the sandbox; file calls reach /workspace/input, /workspace/output
// and /tmp, as sandbox.Files does.
type Sandbox interface {
	// Exec runs a command to its end; timeout 0 is the session's.
	Exec(ctx context.Context, cmd []string, timeout time.Duration) (sandbox.Result, error)
	// Code runs a cell in the default interpreter context of a language
	// (python, javascript or bash), whose state persists between calls.
	Code(ctx context.Context, language, code string, timeout time.Duration) (Execution, error)
	// Put writes a file; at most max bytes are taken (0: the folder's cap).
	Put(ctx context.Context, path string, r io.Reader, max int64) (sandbox.FileInfo, error)
	// Get opens a file for reading.
	Get(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error)
	// List describes the entries of a folder, sorted by name.
	List(ctx context.Context, path string) ([]sandbox.FileInfo, error)
	// Artifacts judges every file of /workspace/output and copies nothing.
	Artifacts(ctx context.Context) ([]sandbox.Artifact, error)
	// Collect runs /workspace/output through the artifact filter into dst.
	Collect(ctx context.Context, dst artifact.Destination) ([]sandbox.Artifact, error)
	// Destroy ends the session.
	Destroy(ctx context.Context) error
}

// Execution is what one code cell gave back.
type Execution struct {
	Stdout, Stderr string
	// Outputs are the MIME bundles the cell showed (display) and the value
	// of its last expression (result), in order.
	Outputs []Output
	// Error is the cell's error, or nil.
	Error *CodeError
	// Interrupted: the cell ran past its timeout and was interrupted.
	Interrupted bool
	// Restarted: the interpreter was restarted; earlier state is gone.
	Restarted bool
	// OutputTruncated: stdout and stderr were cut at the interpreter's cap.
	OutputTruncated bool
	Duration        time.Duration
}

// Output is one MIME bundle: MIME type to content, base64 for binary types.
type Output struct {
	// Kind is "result" or "display".
	Kind string
	Data map[string]string
}

// CodeError is an error a cell raised.
type CodeError struct {
	Name, Value string
	Traceback   []string
}

// Local serves Sandbox from a session of this process's Manager. Code
// runs in the session's default interpreter context of each language
// (Session.Code), started on first use and closed with the session.
func Local(s *session.Session) Sandbox { return local{s: s} }

type local struct{ s *session.Session }

func (l local) Code(ctx context.Context, language, code string, timeout time.Duration) (Execution, error) {
	x, err := l.s.Code(ctx, session.CodeRequest{Code: code, Language: language, Timeout: timeout}, nil)
	return fromInterp(x.Execution), err
}

// fromInterp keeps what the tools use of an interpreter's Execution.
func fromInterp(x interp.Execution) Execution {
	out := Execution{Stdout: x.Stdout, Stderr: x.Stderr, Interrupted: x.Interrupted, Restarted: x.Restarted,
		OutputTruncated: x.OutputTruncated, Duration: x.Duration}
	for _, ev := range x.Events {
		if ev.Type == interp.EventResult || ev.Type == interp.EventDisplay {
			out.Outputs = append(out.Outputs, Output{Kind: ev.Type, Data: ev.Data})
		}
	}
	if e := x.Error; e != nil {
		out.Error = &CodeError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
	}
	return out
}

func (l local) Exec(ctx context.Context, cmd []string, timeout time.Duration) (sandbox.Result, error) {
	return l.s.Exec(ctx, sandbox.ProcessSpec{Cmd: cmd, Timeout: sandbox.Duration(timeout)})
}

func (l local) Put(ctx context.Context, path string, r io.Reader, max int64) (sandbox.FileInfo, error) {
	return l.s.Put(ctx, path, r, max)
}

func (l local) Get(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	return l.s.Files().Get(ctx, path)
}

func (l local) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	return l.s.Files().List(ctx, path)
}

func (l local) Artifacts(ctx context.Context) ([]sandbox.Artifact, error) { return l.s.Artifacts(ctx) }

func (l local) Collect(ctx context.Context, dst artifact.Destination) ([]sandbox.Artifact, error) {
	return l.s.Collect(ctx, dst)
}

func (l local) Destroy(ctx context.Context) error { return l.s.Destroy(ctx) }
