package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Remote serves Sandbox from a session of an airlock serve, through the
// client. Code runs in the session's default context of each language, as
// Local's does. What differs from Local is the server's doing: Get
// downloads through the artifact filter (a file it rejects is an error,
// a sanitized one comes rewritten), and Collect places the files that
// may leave as client.RunOnce does, each judged again as it downloads.
// Destroy deletes the session; a second Destroy does nothing, and a
// session that already ended on the server is sandbox.ErrDestroyed.
func Remote(c *client.Client, sessionID string) Sandbox {
	return &remote{c: c, id: sessionID}
}

type remote struct {
	c    *client.Client
	id   string
	gone atomic.Bool
}

func (r *remote) Exec(ctx context.Context, cmd []string, timeout time.Duration) (sandbox.Result, error) {
	return r.c.Exec(ctx, r.id, api.Exec{Cmd: cmd, TimeoutSeconds: timeout.Seconds()})
}

func (r *remote) Code(ctx context.Context, language, code string, timeout time.Duration) (Execution, error) {
	x, err := r.c.RunCode(ctx, r.id, api.Code{Code: code, Language: language, TimeoutSeconds: timeout.Seconds()})
	return fromAPI(x), err
}

// truncatedNote begins the note the interpreter puts where it cut a
// cell's output (the wire has no flag of its own for it).
const truncatedNote = "\n[airlock: output truncated at "

// fromAPI keeps what the tools use of a code call's answer, as
// fromInterp does of an interpreter's Execution.
func fromAPI(x api.CodeResult) Execution {
	out := Execution{Interrupted: x.Interrupted, Restarted: x.Restarted,
		Duration: time.Duration(x.DurationMS * float64(time.Millisecond))}
	var stdout, stderr strings.Builder
	for _, ev := range x.Events {
		switch ev.Type {
		case api.EventStdout:
			stdout.WriteString(ev.Text)
		case api.EventStderr:
			stderr.WriteString(ev.Text)
		case api.EventResult, api.EventDisplay:
			out.Outputs = append(out.Outputs, Output{Kind: ev.Type, Data: ev.Data})
		case api.EventError:
			out.Error = &CodeError{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
		case api.EventRestarted:
			out.Restarted = true
		}
		if (ev.Type == api.EventStdout || ev.Type == api.EventStderr) && strings.Contains(ev.Text, truncatedNote) {
			out.OutputTruncated = true
		}
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	return out
}

// Put writes r to path. With max set, the upload is cut off past max
// bytes and fails with ErrLimit; without, the folder's cap is the
// server's.
func (r *remote) Put(ctx context.Context, p string, rd io.Reader, max int64) (sandbox.FileInfo, error) {
	if max <= 0 {
		return r.c.PutFile(ctx, r.id, p, rd)
	}
	lr := &capReader{r: rd, left: max}
	info, err := r.c.PutFile(ctx, r.id, p, lr)
	if lr.over {
		return info, fmt.Errorf("%s: over %d bytes: %w", p, max, sandbox.ErrLimit)
	}
	return info, err
}

// capReader reads at most left bytes of r and fails past them.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		c.over = true
		return 0, sandbox.ErrLimit
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		c.over = true
		return n, sandbox.ErrLimit
	}
	return n, err
}

// Get downloads path through the server's artifact filter. A folder is
// an error (ErrInvalid), as it is to Local's Get.
func (r *remote) Get(ctx context.Context, p string) (io.ReadCloser, sandbox.FileInfo, error) {
	f, err := r.c.GetFile(ctx, r.id, p)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	return f, sandbox.FileInfo{Path: p, Name: path.Base(p), Size: f.Size}, nil
}

func (r *remote) List(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	return r.c.ListFiles(ctx, r.id, p)
}

func (r *remote) Artifacts(ctx context.Context) ([]sandbox.Artifact, error) {
	arts, err := r.c.Artifacts(ctx, r.id)
	if arts == nil && err == nil {
		arts = []sandbox.Artifact{}
	}
	return arts, err
}

// Collect judges /workspace/output on the server and downloads what may
// leave into dst; without dst.Dir it only lists the verdicts.
func (r *remote) Collect(ctx context.Context, dst artifact.Destination) ([]sandbox.Artifact, error) {
	if dst.Dir == "" {
		return r.c.Collect(ctx, r.id, nil)
	}
	p, err := artifact.OpenPlacer(dst)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return r.c.Collect(ctx, r.id, p.Save)
}

func (r *remote) Destroy(ctx context.Context) error {
	if r.gone.Load() {
		return nil
	}
	err := r.c.DeleteSession(ctx, r.id)
	if errors.Is(err, client.ErrEnded) {
		err = fmt.Errorf("%w: %w", sandbox.ErrDestroyed, err)
	}
	if err == nil || errors.Is(err, sandbox.ErrDestroyed) {
		r.gone.Store(true)
	}
	return err
}
