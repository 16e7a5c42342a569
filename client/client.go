// Package client is the Go SDK of airlock's HTTP API, v1 (airlock serve):
// typed calls for sessions, files, artifacts, commands (plain and
// streamed), background processes, code and its contexts, and the audit
// log.
//
// Every call takes a context, which bounds it. A failed call returns an
// *api.Error carrying the HTTP status; errors.Is matches it against the
// sentinels of this package (ErrNotFound, ErrEnded, ErrLimit,
// ErrUnauthorized…). Calls that are safe to repeat (GET, DELETE, and PUT
// with a body that can be read again) are retried after connection errors
// and 503s, with backoff; POSTs, exec and code among them, never are,
// except, when Options.RetryRateLimited asks for it, after a 429 of the
// rate limiter, which answers before the server does anything.
//
// The package imports airlock's api and sandbox packages and the standard
// library only: a program that uses it links no backend and no server.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Sentinels that errors.Is matches against the *api.Error of a failed
// call (see api.Error.Is).
var (
	// ErrNotFound: no such session, file, process or context for this
	// key; another tenant's session is not found either.
	ErrNotFound = sandbox.ErrNotFound
	// ErrEnded: the session existed and ended (TTL, idle timeout,
	// destroyed, its sandbox died).
	ErrEnded = api.ErrEnded
	// ErrLimit: a quota or a cap is full (sessions, memory, a file's size).
	ErrLimit = sandbox.ErrLimit
	// ErrRateLimited: the key sent more requests than its rate allows.
	ErrRateLimited = api.ErrRateLimited
	// ErrUnauthorized: no key, or one the server does not know.
	ErrUnauthorized = api.ErrUnauthorized
	// ErrRejected: the artifact filter refused the file.
	ErrRejected = api.ErrRejected
	// ErrInvalid: the server refused the request as malformed.
	ErrInvalid = sandbox.ErrInvalid
	// ErrConflict: something that must not exist already does, or a
	// process has no open stdin.
	ErrConflict = sandbox.ErrExist
	// ErrTooLarge: the request's body is over the server's cap.
	ErrTooLarge = api.ErrTooLarge
	// ErrUnsupported: the server or its backend cannot do what was asked.
	ErrUnsupported = sandbox.ErrUnsupported
	// ErrUnavailable: the server is shutting down, or a proxy before it
	// could not reach it.
	ErrUnavailable = api.ErrUnavailable
)

// Options configure a Client. The zero value is a client without a key,
// with the default retries.
type Options struct {
	// APIKey is sent as "Authorization: Bearer KEY"; "" sends none, for a
	// server without keys.
	APIKey string
	// HTTPClient sends the requests; nil means a client of the Client's
	// own, which keeps connections alive and has no overall timeout (each
	// call's context bounds it). Close closes its idle connections.
	HTTPClient *http.Client
	// Retries is how many more times a call that is safe to repeat is
	// tried after a connection error or a 503, and how many times a 429
	// is waited out with RetryRateLimited; 0 means 3, below 0 none.
	Retries int
	// Backoff is the wait before the first retry, doubled for each next
	// one up to MaxBackoff, with jitter; 0 means 100 ms and 2 s.
	Backoff, MaxBackoff time.Duration
	// RetryRateLimited makes a call answered 429 wait for as long as the
	// Retry-After header says and try again. The rate limiter answers
	// before the server does anything, so any call may be repeated; a
	// session create refused by the tenant's quota (code "limit") is
	// retried too, other calls refused by a cap are not. A wait over
	// MaxRetryAfter (0 means 30 s) is not waited: the error is returned,
	// its RetryAfter set.
	RetryRateLimited bool
	MaxRetryAfter    time.Duration
	// UserAgent names the program in requests; "" means
	// "airlock-go-client".
	UserAgent string
}

// Client talks to one airlock server. It is safe for concurrent use.
type Client struct {
	base *url.URL
	opts Options
	hc   *http.Client
	own  bool // hc is the Client's own; Close closes its idle connections
}

// New returns a client of the server at baseURL ("http://127.0.0.1:8080").
// A base URL that carries a key in its query, or user information, is
// refused: a key goes in Options.APIKey, which travels in a header.
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("airlock URL %q: %v: %w", baseURL, err, ErrInvalid)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("airlock URL %q: want http://HOST:PORT or https://HOST: %w", baseURL, ErrInvalid)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("airlock URL %q: no user, query or fragment (give the key as the API key, never in the URL): %w", u.Redacted(), ErrInvalid)
	}
	if opts.Retries == 0 {
		opts.Retries = 3
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	if opts.MaxRetryAfter <= 0 {
		opts.MaxRetryAfter = 30 * time.Second
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "airlock-go-client"
	}
	c := &Client{base: u, opts: opts, hc: opts.HTTPClient}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		c.hc, c.own = &http.Client{Transport: t}, true
	}
	return c, nil
}

// Environment variables that FromEnv reads.
const (
	EnvURL = "AIRLOCK_URL"
	EnvKey = "AIRLOCK_API_KEY"
)

// FromEnv returns a client of the server that AIRLOCK_URL names, with the
// key in AIRLOCK_API_KEY, as read by getenv (os.Getenv).
func FromEnv(getenv func(string) string, opts Options) (*Client, error) {
	u := getenv(EnvURL)
	if u == "" {
		return nil, fmt.Errorf("%s is not set: %w", EnvURL, ErrInvalid)
	}
	if opts.APIKey == "" {
		opts.APIKey = getenv(EnvKey)
	}
	return New(u, opts)
}

// Close closes the idle connections of the Client's own HTTP client; an
// Options.HTTPClient is left alone. The Client stays usable.
func (c *Client) Close() {
	if c.own {
		c.hc.CloseIdleConnections()
	}
}

// retryKind says when a request may be sent again.
type retryKind int

const (
	// noRetry: never after the request may have reached the server.
	noRetry retryKind = iota
	// safeRetry: after connection errors and 503s too; the request is
	// idempotent.
	safeRetry
)

// request is one call.
type request struct {
	method, path string
	query        url.Values
	// body is a JSON or raw body held in memory; reader a raw body that
	// streams (repeatable only when it is an io.Seeker).
	body   []byte
	reader io.Reader
	// size is reader's length when known, else -1 (sent chunked).
	size        int64
	contentType string
	accept      string
	retry       retryKind
	// quotaRetry lets RetryRateLimited wait out a 429 "limit" as well.
	quotaRetry bool
	// goneOK makes a 404 or 410 answered to a repeated DELETE a success:
	// the first try did it.
	goneOK bool
}

// do sends req, retrying it where that is safe, and returns a response
// with a 2xx status; the caller closes its body. Any other status is an
// *api.Error.
func (c *Client) do(ctx context.Context, req *request) (*http.Response, error) {
	u := *c.base
	u.Path = c.base.Path + req.path
	u.RawPath = c.base.EscapedPath() + escapePath(req.path)
	if req.query != nil {
		u.RawQuery = req.query.Encode()
	}
	retry := req.retry
	var seekStart int64
	if req.reader != nil {
		if s, ok := req.reader.(io.Seeker); ok {
			off, err := s.Seek(0, io.SeekCurrent)
			if err != nil {
				retry = noRetry
			}
			seekStart = off
		} else {
			retry = noRetry
		}
	}
	id := requestID()
	for attempt := 0; ; attempt++ {
		var body io.Reader
		switch {
		case req.body != nil:
			body = bytes.NewReader(req.body)
		case req.reader != nil:
			if attempt > 0 {
				if _, err := req.reader.(io.Seeker).Seek(seekStart, io.SeekStart); err != nil {
					return nil, fmt.Errorf("airlock %s %s: rewinding the body for a retry: %w", req.method, req.path, err)
				}
			}
			body = req.reader
		}
		hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
		if err != nil {
			return nil, fmt.Errorf("airlock %s %s: %w", req.method, req.path, err)
		}
		switch {
		case req.body != nil:
			hr.ContentLength = int64(len(req.body))
		case req.reader != nil && req.size >= 0:
			hr.ContentLength = req.size
			if req.size == 0 {
				hr.Body = http.NoBody
			}
		}
		if req.contentType != "" {
			hr.Header.Set("Content-Type", req.contentType)
		}
		if req.accept != "" {
			hr.Header.Set("Accept", req.accept)
		} else {
			hr.Header.Set("Accept", api.ContentJSON)
		}
		if c.opts.APIKey != "" {
			hr.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
		}
		hr.Header.Set("User-Agent", c.opts.UserAgent)
		hr.Header.Set(api.HeaderRequestID, id)
		resp, err := c.hc.Do(hr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("airlock %s %s: %w", req.method, req.path, context.Cause(ctx))
			}
			if retry == safeRetry && attempt < c.opts.Retries {
				if werr := sleep(ctx, c.backoff(attempt)); werr != nil {
					return nil, fmt.Errorf("airlock %s %s: %w (after %v)", req.method, req.path, werr, err)
				}
				continue
			}
			return nil, fmt.Errorf("airlock %s %s: %w", req.method, req.path, err)
		}
		if resp.StatusCode < 300 {
			return resp, nil
		}
		aerr := readError(resp)
		if req.goneOK && attempt > 0 && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone) {
			return emptyResponse(resp), nil
		}
		if attempt < c.opts.Retries {
			if wait, ok := c.retryWait(req, retry, aerr, attempt); ok {
				if werr := sleep(ctx, wait); werr != nil {
					return nil, fmt.Errorf("airlock %s %s: %w (after %v)", req.method, req.path, werr, aerr)
				}
				continue
			}
		}
		return nil, aerr
	}
}

// retryWait says whether a failed answer is worth another try, and after
// how long.
func (c *Client) retryWait(req *request, retry retryKind, e *api.Error, attempt int) (time.Duration, bool) {
	switch {
	case e.Status == http.StatusServiceUnavailable && retry == safeRetry:
		if e.RetryAfter > 0 && e.RetryAfter <= c.opts.MaxRetryAfter {
			return e.RetryAfter, true
		}
		return c.backoff(attempt), true
	case e.Status == http.StatusTooManyRequests && c.opts.RetryRateLimited &&
		(e.Code == api.CodeRateLimited || e.Code == api.CodeLimit && req.quotaRetry):
		wait := e.RetryAfter
		if wait <= 0 {
			wait = c.backoff(attempt)
		}
		return wait, wait <= c.opts.MaxRetryAfter
	}
	return 0, false
}

// backoff is the wait before retry number attempt+1: doubling from
// Backoff up to MaxBackoff, between half of that and all of it.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.opts.Backoff << min(attempt, 20)
	if d > c.opts.MaxBackoff || d <= 0 {
		d = c.opts.MaxBackoff
	}
	half := int64(d / 2)
	n, err := rand.Int(rand.Reader, big.NewInt(half+1))
	if err != nil {
		return d
	}
	return time.Duration(half + n.Int64())
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// emptyResponse stands for a success that an earlier try already had.
func emptyResponse(resp *http.Response) *http.Response {
	return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: resp.Request}
}

// readError turns a failed response into an *api.Error and closes its
// body. A body that is not the server's JSON error (a proxy's page, the
// text of a 405) gives a code from the status and the body's first line.
func readError(resp *http.Response) *api.Error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	e := &api.Error{}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		msg, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if len(msg) > 512 {
			msg = msg[:512]
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		e = &api.Error{Code: codeOf(resp.StatusCode), Message: msg}
	}
	e.Status = resp.StatusCode
	e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
	return e
}

// codeOf is the error code a status stands for, when the body has none.
func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed:
		return api.CodeInvalid
	case http.StatusUnauthorized:
		return api.CodeUnauthorized
	case http.StatusForbidden:
		return api.CodeForbidden
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusRequestTimeout:
		return api.CodeTimeout
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusGone:
		return api.CodeEnded
	case http.StatusRequestEntityTooLarge:
		return api.CodeTooLarge
	case http.StatusTooManyRequests:
		return api.CodeRateLimited
	case http.StatusNotImplemented:
		return api.CodeUnsupported
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// requestID names one call in the server's logs, the same over retries.
func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}

// escapePath escapes each segment of p, keeping its slashes.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// call sends a JSON request (in, when not nil) and decodes a JSON answer
// into out (when not nil).
func (c *Client) call(ctx context.Context, req *request, in, out any) error {
	if in != nil {
		if err := marshalInto(req, in); err != nil {
			return err
		}
	}
	if req.retry == noRetry && req.method != http.MethodPost {
		req.retry = safeRetry
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("airlock %s %s: reading the answer: %w", req.method, req.path, err)
	}
	return nil
}

// get, post and del are JSON calls of one method.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.call(ctx, &request{method: http.MethodGet, path: path, query: q}, nil, out)
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	return c.call(ctx, &request{method: http.MethodPost, path: path}, in, out)
}

func (c *Client) del(ctx context.Context, path string) error {
	return c.call(ctx, &request{method: http.MethodDelete, path: path, goneOK: true}, nil, nil)
}

// sessionPath is the path of session id's routes, with more appended.
func sessionPath(id string, more ...string) (string, error) {
	if id == "" || strings.ContainsAny(id, "/?#") || id == "." || id == ".." {
		return "", fmt.Errorf("session id %q: %w", id, ErrInvalid)
	}
	return "/v1/sessions/" + id + strings.Join(more, ""), nil
}

// checkName refuses a process or context id that would leave its route.
func checkName(what, v string) error {
	if v == "" || strings.ContainsAny(v, "/?#") || v == "." || v == ".." {
		return fmt.Errorf("%s id %q: %w", what, v, ErrInvalid)
	}
	return nil
}

// Health asks GET /healthz: nil when the server answers.
func (c *Client) Health(ctx context.Context) error {
	return c.get(ctx, "/healthz", nil, nil)
}

// Ready asks GET /readyz: nil when the server takes sessions.
func (c *Client) Ready(ctx context.Context) error {
	return c.get(ctx, "/readyz", nil, nil)
}

// OpenAPI fetches the server's OpenAPI document, GET /openapi.json.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: "/openapi.json", retry: safeRetry})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}

// errNoResult is a stream that ended without its final event.
var errNoResult = errors.New("the stream ended before its result")

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// marshalInto sets req's body to in as JSON.
func marshalInto(req *request, in any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("airlock %s %s: %w", req.method, req.path, err)
	}
	req.body, req.contentType = b, api.ContentJSON
	return nil
}
