package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Exec runs a command in the session and waits for its Result: POST
// .../exec. It is never retried: the command may have run. A command
// that fails, times out or is killed is a Result, not an error; the error
// is for what kept it from running or reporting.
func (c *Client) Exec(ctx context.Context, id string, req api.Exec) (sandbox.Result, error) {
	var out sandbox.Result
	p, err := sessionPath(id, "/exec")
	if err != nil {
		return out, err
	}
	if req.Background {
		return out, fmt.Errorf("a background process is started with StartProcess: %w", ErrInvalid)
	}
	err = c.post(ctx, p, req, &out)
	return out, err
}

// ExecStream runs a command in the session and streams its output: the
// events are stdout and stderr chunks as the command writes them, then
// one result (or error) event. Cancelling ctx or closing the stream kills
// the command.
func (c *Client) ExecStream(ctx context.Context, id string, req api.Exec) (*Stream[api.ExecEvent], error) {
	p, err := sessionPath(id, "/exec")
	if err != nil {
		return nil, err
	}
	if req.Background {
		return nil, fmt.Errorf("a background process is started with StartProcess: %w", ErrInvalid)
	}
	return openStream[api.ExecEvent](ctx, c, p, req)
}

// openStream posts in to path, asking for NDJSON.
func openStream[E any](ctx context.Context, c *Client, path string, in any) (*Stream[E], error) {
	req := &request{method: http.MethodPost, path: path, accept: api.ContentNDJSON}
	if err := marshalInto(req, in); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, api.ContentNDJSON) {
		resp.Body.Close()
		return nil, fmt.Errorf("airlock POST %s: answered %q, not a stream", path, ct)
	}
	return newStream[E](resp.Body), nil
}

// Output receives a command's output as it comes; either func may be
// nil. The data of one call is a chunk as the command wrote it, not a
// line.
type Output struct {
	Stdout, Stderr func(data string)
}

// ToWriter is an Output func that writes to w, ignoring its errors.
func ToWriter(w io.Writer) func(string) {
	return func(s string) { _, _ = io.WriteString(w, s) }
}

// ExecStreaming runs a command in the session, calls out's funcs with its
// output as it comes, and returns its Result. The Result keeps the output
// too, up to the policy's cap; what streams is not capped.
func (c *Client) ExecStreaming(ctx context.Context, id string, req api.Exec, out Output) (sandbox.Result, error) {
	st, err := c.ExecStream(ctx, id, req)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer st.Close()
	for st.Next() {
		ev := st.Event()
		switch ev.Type {
		case api.EventStdout:
			if out.Stdout != nil {
				out.Stdout(ev.Data)
			}
		case api.EventStderr:
			if out.Stderr != nil {
				out.Stderr(ev.Data)
			}
		case api.EventResult:
			if ev.Result == nil {
				return sandbox.Result{}, fmt.Errorf("airlock exec: a result event without a result")
			}
			return *ev.Result, nil
		case api.EventError:
			return sandbox.Result{}, streamError(ev.Error)
		}
	}
	if err := st.Err(); err != nil {
		return sandbox.Result{}, err
	}
	return sandbox.Result{}, fmt.Errorf("airlock exec: %w", errNoResult)
}
