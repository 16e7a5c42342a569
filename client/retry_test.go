package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// These tests check the client's retry policy against a scripted HTTP
// handler: which calls are tried again, after which answers, and that
// nothing that may have acted on the server is repeated. The SDK against
// a real airlock serve is tested in test/e2e.

// script answers each request with the next of its steps, and records
// what came.
type script struct {
	mu    sync.Mutex
	steps []func(w http.ResponseWriter, r *http.Request)
	got   []string // "METHOD PATH body" per request
	ids   []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.got)
	s.got = append(s.got, r.Method+" "+r.URL.Path+" "+string(b))
	s.ids = append(s.ids, r.Header.Get(api.HeaderRequestID))
	step := s.steps[min(n, len(s.steps)-1)]
	s.mu.Unlock()
	step(w, r)
}

// n is how many requests came.
func (s *script) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func status(code int, body string, hdr ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		if strings.HasPrefix(body, "{") {
			w.Header().Set("Content-Type", api.ContentJSON)
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// drop closes the connection without an answer: a connection error.
func drop(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

var (
	ok200       = status(200, `{"id":"s1","sessions":[],"exit_code":0}`)
	unavailable = status(503, `{"code":"unavailable","message":"the server is shutting down"}`)
	rateLimited = status(429, `{"code":"rate_limited","message":"slow down"}`, "Retry-After", "1")
	quotaFull   = status(429, `{"code":"limit","message":"quota"}`, "Retry-After", "1")
)

func newScripted(t *testing.T, opts client.Options, steps ...func(http.ResponseWriter, *http.Request)) (*client.Client, *script) {
	t.Helper()
	s := &script{steps: steps}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	if opts.Backoff == 0 {
		opts.Backoff, opts.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	c, err := client.New(hs.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, s
}

func TestRetrySafeCalls(t *testing.T) {
	ctx := context.Background()
	c, s := newScripted(t, client.Options{}, unavailable, drop, ok200)
	if _, err := c.ListSessions(ctx); err != nil {
		t.Fatalf("a GET after a 503 and a dropped connection: %v", err)
	}
	s.mu.Lock()
	ids, got := append([]string(nil), s.ids...), append([]string(nil), s.got...)
	s.mu.Unlock()
	if len(got) != 3 || ids[0] != ids[2] || ids[0] == "" {
		t.Errorf("tries %v, request ids %v: want 3 tries of one request id", got, ids)
	}
	c, s = newScripted(t, client.Options{Retries: 2}, unavailable)
	_, err := c.GetSession(ctx, "s1")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 503 || !errors.Is(err, client.ErrUnavailable) || s.n() != 3 {
		t.Errorf("a GET answered 503 each time: %v after %d tries, want the 503 after 3", err, s.n())
	}
	// a PUT is resent whole when its body can be read again
	c, s = newScripted(t, client.Options{}, drop, status(201, `{"path":"/workspace/input/a"}`))
	if _, err := c.PutFile(ctx, "s1", "input/a", bytes.NewReader([]byte("payload"))); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	got = append([]string(nil), s.got...)
	s.mu.Unlock()
	if len(got) != 2 || !strings.HasSuffix(got[1], " payload") {
		t.Errorf("the PUT's tries: %q", got)
	}
	// and not when it cannot
	c, s = newScripted(t, client.Options{}, drop, status(201, `{}`))
	if _, err := c.PutFile(ctx, "s1", "input/a", io.MultiReader(strings.NewReader("payload"))); err == nil || s.n() != 1 {
		t.Errorf("a PUT of a stream after a dropped connection: %v after %d tries, want an error after 1", err, s.n())
	}
	// a DELETE whose first try did it
	c, s = newScripted(t, client.Options{}, drop, status(410, `{"code":"ended","message":"destroyed"}`))
	if err := c.DeleteSession(ctx, "s1"); err != nil || s.n() != 2 {
		t.Errorf("a DELETE that finds the session gone on its retry: %v after %d tries, want success", err, s.n())
	}
	c, _ = newScripted(t, client.Options{}, status(410, `{"code":"ended","message":"destroyed"}`))
	if err := c.DeleteSession(ctx, "s1"); !errors.Is(err, client.ErrEnded) {
		t.Errorf("a DELETE of an ended session, first try: %v, want ErrEnded", err)
	}
}

func TestNoRetryOfPosts(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(c *client.Client) error{
		"exec": func(c *client.Client) error {
			_, err := c.Exec(ctx, "s1", api.Exec{Cmd: []string{"true"}})
			return err
		},
		"exec stream": func(c *client.Client) error {
			_, err := c.ExecStream(ctx, "s1", api.Exec{Cmd: []string{"true"}})
			return err
		},
		"code": func(c *client.Client) error {
			_, err := c.RunCode(ctx, "s1", api.Code{Code: "1"})
			return err
		},
		"create": func(c *client.Client) error {
			_, err := c.CreateSession(ctx, api.CreateSession{})
			return err
		},
		"signal": func(c *client.Client) error { return c.SignalProcess(ctx, "s1", "p1", "INT") },
		"stdin":  func(c *client.Client) error { return c.WriteStdin(ctx, "s1", "p1", strings.NewReader("x")) },
	}
	for name, call := range calls {
		for _, step := range []func(http.ResponseWriter, *http.Request){unavailable, drop} {
			c, s := newScripted(t, client.Options{RetryRateLimited: true}, step, ok200)
			if err := call(c); err == nil || s.n() != 1 {
				t.Errorf("%s: %v after %d tries, want an error after 1", name, err, s.n())
			}
		}
	}
}

func TestRateLimited(t *testing.T) {
	ctx := context.Background()
	c, s := newScripted(t, client.Options{}, rateLimited, ok200)
	_, err := c.ListSessions(ctx)
	var ae *api.Error
	if !errors.Is(err, client.ErrRateLimited) || !errors.As(err, &ae) || ae.RetryAfter != time.Second || s.n() != 1 {
		t.Fatalf("a 429 without RetryRateLimited: %v (%+v) after %d tries, want it at once with RetryAfter 1s", err, ae, s.n())
	}
	// opted in, even an exec is sent again: the limiter answered before
	// anything ran
	c, s = newScripted(t, client.Options{RetryRateLimited: true}, rateLimited, ok200)
	start := time.Now()
	if _, err := c.Exec(ctx, "s1", api.Exec{Cmd: []string{"true"}}); err != nil || s.n() != 2 {
		t.Fatalf("an exec answered 429 rate_limited, opted in: %v after %d tries", err, s.n())
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the retry came after %v, before Retry-After", d)
	}
	// a full quota: a create waits, an exec does not
	c, s = newScripted(t, client.Options{RetryRateLimited: true}, quotaFull, ok200)
	if _, err := c.CreateSession(ctx, api.CreateSession{}); err != nil || s.n() != 2 {
		t.Errorf("a create at a full quota, opted in: %v after %d tries, want success after 2", err, s.n())
	}
	c, s = newScripted(t, client.Options{RetryRateLimited: true}, quotaFull, ok200)
	if _, err := c.Exec(ctx, "s1", api.Exec{Cmd: []string{"true"}}); !errors.Is(err, client.ErrLimit) || s.n() != 1 {
		t.Errorf("an exec refused by a cap: %v after %d tries, want ErrLimit after 1", err, s.n())
	}
	// a wait past MaxRetryAfter is not waited
	c, s = newScripted(t, client.Options{RetryRateLimited: true, MaxRetryAfter: 500 * time.Millisecond}, rateLimited, ok200)
	if _, err := c.ListSessions(ctx); !errors.Is(err, client.ErrRateLimited) || s.n() != 1 {
		t.Errorf("a Retry-After over MaxRetryAfter: %v after %d tries", err, s.n())
	}
	// ctx bounds the wait
	c, _ = newScripted(t, client.Options{RetryRateLimited: true}, rateLimited)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := c.ListSessions(cctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 900*time.Millisecond {
		t.Errorf("a wait cut by ctx: %v after %v", err, time.Since(start))
	}
}

func TestErrorBodies(t *testing.T) {
	ctx := context.Background()
	c, _ := newScripted(t, client.Options{}, status(502, "<html>bad gateway</html>\n<p>…"))
	_, err := c.GetSession(ctx, "s1")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Code != api.CodeUnavailable || ae.Message != "<html>bad gateway</html>" {
		t.Errorf("a proxy's page: %+v", ae)
	}
	c, _ = newScripted(t, client.Options{Retries: -1}, status(404, `{"code":"not_found","message":"session s1: not found"}`))
	_, err = c.GetSession(ctx, "s1")
	if !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrEnded) || !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("a 404: %v", err)
	}
	for _, bad := range []string{"", "a/b", "..", "x?y"} {
		if _, err := c.GetSession(ctx, bad); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("session id %q: %v, want ErrInvalid", bad, err)
		}
	}
	for _, u := range []string{"ftp://x", "http://", "http://u:p@host", "http://host/?api_key=k"} {
		if _, err := client.New(u, client.Options{}); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("URL %q: %v, want ErrInvalid", u, err)
		}
	}
}
