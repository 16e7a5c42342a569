package client

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/api"
)

// RunCode runs code in one of the session's interpreter contexts (the
// language's default one when req.Context is "") and waits for all of its
// events: POST .../code. State (variables, imports) persists between
// calls in a context. It is never retried.
func (c *Client) RunCode(ctx context.Context, id string, req api.Code) (api.CodeResult, error) {
	var out api.CodeResult
	p, err := sessionPath(id, "/code")
	if err != nil {
		return out, err
	}
	err = c.post(ctx, p, req, &out)
	return out, err
}

// CodeStream runs code and streams its events as they happen: stdout
// and stderr text, display and result bundles (text/plain, image/png…),
// an error with its traceback, then end. Cancelling ctx or closing the
// stream interrupts the call.
func (c *Client) CodeStream(ctx context.Context, id string, req api.Code) (*Stream[api.CodeEvent], error) {
	p, err := sessionPath(id, "/code")
	if err != nil {
		return nil, err
	}
	return openStream[api.CodeEvent](ctx, c, p, req)
}

// RunCodeStreaming runs code, calls on with each event as it happens,
// and returns the events gathered as a CodeResult once the call ends. An
// exception in the code is an error event in the result, not an error;
// an error event of airlock's own (its Error set) is returned as the
// error.
func (c *Client) RunCodeStreaming(ctx context.Context, id string, req api.Code, on func(api.CodeEvent)) (api.CodeResult, error) {
	out := api.CodeResult{Context: req.Context, Events: []api.CodeEvent{}}
	st, err := c.CodeStream(ctx, id, req)
	if err != nil {
		return out, err
	}
	defer st.Close()
	for st.Next() {
		ev := st.Event()
		if on != nil {
			on(ev)
		}
		switch ev.Type {
		case api.EventError:
			if ev.Error != nil {
				return out, streamError(ev.Error)
			}
		case api.EventRestarted:
			out.Restarted = true
		case api.EventEnd:
			out.ExecutionCount, out.DurationMS = ev.ExecutionCount, ev.DurationMS
			out.Interrupted = ev.Reason != ""
			return out, nil
		}
		if ev.ExecutionCount > 0 {
			out.ExecutionCount = ev.ExecutionCount
		}
		out.Events = append(out.Events, ev)
	}
	if err := st.Err(); err != nil {
		return out, err
	}
	return out, fmt.Errorf("airlock code: %w", errNoResult)
}

// CreateContext makes an interpreter context in the session: POST
// .../contexts.
func (c *Client) CreateContext(ctx context.Context, id string, req api.CreateContext) (api.Context, error) {
	var out api.Context
	p, err := sessionPath(id, "/contexts")
	if err != nil {
		return out, err
	}
	err = c.post(ctx, p, req, &out)
	return out, err
}

// ListContexts lists the session's interpreter contexts.
func (c *Client) ListContexts(ctx context.Context, id string) ([]api.Context, error) {
	var out api.ContextList
	p, err := sessionPath(id, "/contexts")
	if err != nil {
		return nil, err
	}
	err = c.get(ctx, p, nil, &out)
	return out.Contexts, err
}

// DeleteContext ends an interpreter context and what it held.
func (c *Client) DeleteContext(ctx context.Context, id, contextID string) error {
	if err := checkName("context", contextID); err != nil {
		return err
	}
	p, err := sessionPath(id, "/contexts/", contextID)
	if err != nil {
		return err
	}
	return c.del(ctx, p)
}

// RestartContext restarts an interpreter context: its state (variables,
// imports) is gone; the context keeps its id.
func (c *Client) RestartContext(ctx context.Context, id, contextID string) error {
	if err := checkName("context", contextID); err != nil {
		return err
	}
	p, err := sessionPath(id, "/contexts/", contextID, "/restart")
	if err != nil {
		return err
	}
	return c.post(ctx, p, nil, nil)
}
