package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// StartProcess starts a background process and answers at once; its
// stdin stays open for WriteStdin and CloseStdin. It is never retried.
func (c *Client) StartProcess(ctx context.Context, id string, req api.Exec) (api.Process, error) {
	var out api.Process
	p, err := sessionPath(id, "/exec")
	if err != nil {
		return out, err
	}
	if req.Stdin != "" {
		return out, fmt.Errorf("a background process takes its stdin from WriteStdin: %w", ErrInvalid)
	}
	req.Background = true
	err = c.post(ctx, p, req, &out)
	return out, err
}

// ListProcesses lists the session's background processes, oldest first.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	var out api.ProcessList
	p, err := sessionPath(id, "/processes")
	if err != nil {
		return nil, err
	}
	err = c.get(ctx, p, nil, &out)
	return out.Processes, err
}

func processPath(id, pid string, more string) (string, error) {
	if err := checkName("process", pid); err != nil {
		return "", err
	}
	return sessionPath(id, "/processes/", pid, more)
}

// GetProcess describes a background process; one that ended carries its
// Result.
func (c *Client) GetProcess(ctx context.Context, id, pid string) (api.Process, error) {
	return c.waitOnce(ctx, id, pid, 0)
}

// waitOnce is GET .../processes/{pid}, with ?wait when wait > 0.
func (c *Client) waitOnce(ctx context.Context, id, pid string, wait time.Duration) (api.Process, error) {
	var out api.Process
	p, err := processPath(id, pid, "")
	if err != nil {
		return out, err
	}
	var q url.Values
	if wait > 0 {
		q = url.Values{"wait": {strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)}}
	}
	err = c.get(ctx, p, q, &out)
	return out, err
}

// longPoll bounds one wait on the server; WaitProcess asks again until
// the process ends.
const longPoll = 30 * time.Second

// WaitProcess waits until a background process ends, or max passes (0:
// until ctx ends), and describes it: Running tells which happened.
func (c *Client) WaitProcess(ctx context.Context, id, pid string, max time.Duration) (api.Process, error) {
	var deadline time.Time
	if max > 0 {
		deadline = time.Now().Add(max)
	}
	for {
		wait := longPoll
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		if wait < time.Millisecond {
			return c.GetProcess(ctx, id, pid)
		}
		pr, err := c.waitOnce(ctx, id, pid, wait)
		if err != nil || !pr.Running || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return pr, err
		}
	}
}

// SignalProcess sends a signal ("SIGINT", "TERM", "9") to a background
// process. It is never retried: a signal is not idempotent.
func (c *Client) SignalProcess(ctx context.Context, id, pid, sig string) error {
	p, err := processPath(id, pid, "/signal")
	if err != nil {
		return err
	}
	return c.post(ctx, p, api.Signal{Signal: sig}, nil)
}

// WriteStdin writes r to a background process's stdin, which stays open.
// It is never retried: the bytes may have arrived.
func (c *Client) WriteStdin(ctx context.Context, id, pid string, r io.Reader) error {
	return c.stdin(ctx, id, pid, r, false)
}

// CloseStdin closes a background process's stdin: it reads end of file.
func (c *Client) CloseStdin(ctx context.Context, id, pid string) error {
	return c.stdin(ctx, id, pid, http.NoBody, true)
}

func (c *Client) stdin(ctx context.Context, id, pid string, r io.Reader, eof bool) error {
	p, err := processPath(id, pid, "/stdin")
	if err != nil {
		return err
	}
	req := &request{method: http.MethodPost, path: p, reader: r, size: -1, contentType: "application/octet-stream"}
	if r == http.NoBody {
		req.size = 0
	}
	if eof {
		req.query = url.Values{"eof": {"1"}}
	}
	return c.call(ctx, req, nil, nil)
}
