package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/e2b"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	"golang.org/x/time/rate"
)

// Options configure a Server.
type Options struct {
	// Manager runs the sessions. The Server does not close it.
	Manager *session.Manager
	// Keys authenticate requests; nil serves one tenant, DefaultTenant,
	// without keys (only on loopback: see CheckListen).
	Keys *Keys
	// RateLimit is each key's sustained requests per second, and
	// RateBurst its burst; 0 means 50 and 100.
	RateLimit float64
	RateBurst int
	// MaxJSONBytes bounds a JSON request body; 0 means 4 MiB.
	MaxJSONBytes int64
	// BodyTimeout bounds how long a client may take to send a JSON body;
	// 0 means 30 s. File uploads get UploadTimeout, 0 meaning 10 minutes.
	BodyTimeout, UploadTimeout time.Duration
	// Audit reads the audit log for GET /v1/audit; nil answers 501.
	Audit AuditReader
	// Ready tells /readyz whether the server takes sessions; nil means
	// ready.
	Ready func() error
	// Logger receives one line per request; nil discards them.
	Logger *slog.Logger
	// Extra mounts more handlers on the server's mux (metrics), before
	// authentication: they authenticate themselves.
	Extra map[string]http.Handler
	// E2B, when set, serves the E2B-compatible surface (package e2b) beside
	// v1 on the same Manager and keys: its control plane under
	// /v2/sandboxes and /sandboxes, and each sandbox's envd and code
	// interpreter for the requests that name a sandbox (E2b-Sandbox-Id).
	// Manager, Authenticate, Allow and Logger are filled in here.
	E2B *e2b.Options
}

// AuditReader reads a tenant's audit records: after is the cursor (the
// last id seen), limit the page size.
type AuditReader interface {
	Query(ctx context.Context, tenant string, after int64, limit int) ([]api.AuditRecord, error)
}

// DefaultTenant is the tenant of a server without keys.
const DefaultTenant = "default"

// Server is airlock's HTTP API over a session Manager.
type Server struct {
	opts     Options
	mux      *http.ServeMux
	log      *slog.Logger
	limiters sync.Map // key hash or tenant -> *rate.Limiter
	closing  atomic.Bool
	active   atomic.Int64 // API calls in progress, for Drain
	routes   []route
	openapi  []byte       // the OpenAPI document, built once by New
	e2b      *e2b.Handler // nil without the E2B surface
}

// route is one registered route and what the OpenAPI document says of it.
type route struct {
	Method, Pattern string
	// Public routes need no key.
	Public bool
	// Mounted routes are Options.Extra's: the document knows only that
	// they exist.
	Mounted bool
	Doc     routeDoc
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Manager == nil {
		return nil, fmt.Errorf("server: no session manager: %w", sandbox.ErrInvalid)
	}
	if opts.RateLimit <= 0 {
		opts.RateLimit = 50
	}
	if opts.RateBurst <= 0 {
		opts.RateBurst = 100
	}
	if opts.MaxJSONBytes <= 0 {
		opts.MaxJSONBytes = 4 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 30 * time.Second
	}
	if opts.UploadTimeout <= 0 {
		opts.UploadTimeout = 10 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), log: opts.Logger}
	s.register()
	if opts.E2B != nil {
		eo := *opts.E2B
		eo.Manager, eo.Authenticate, eo.Allow, eo.Logger = opts.Manager, s.e2bTenant, s.e2bAllow, opts.Logger
		eo.Identified = func(w http.ResponseWriter, tenant string) {
			if sw, ok := w.(*statusWriter); ok {
				sw.tenant = tenant
			}
		}
		h, err := e2b.New(eo)
		if err != nil {
			return nil, err
		}
		s.e2b = h
		for _, p := range e2b.Patterns() {
			s.mux.Handle(p, h)
		}
	}
	extra := make([]string, 0, len(opts.Extra))
	for pattern := range opts.Extra {
		extra = append(extra, pattern)
	}
	sort.Strings(extra)
	for _, pattern := range extra {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "", pattern
		}
		s.routes = append(s.routes, route{Method: method, Pattern: path, Public: true, Mounted: true})
		s.mux.Handle(pattern, opts.Extra[pattern])
	}
	doc, err := s.buildOpenAPI()
	if err != nil {
		return nil, fmt.Errorf("server: the OpenAPI document: %w", err)
	}
	s.openapi = doc
	return s, nil
}

// loopback tells whether addr (HOST:PORT) listens on loopback only.
func loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("address %q: %v: %w", addr, err, sandbox.ErrInvalid)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// CheckPlain refuses plain HTTP beyond loopback: API keys and sandbox
// tokens would cross the network in the clear.
func CheckPlain(addr string) error {
	lo, err := loopback(addr)
	if err != nil || lo {
		return err
	}
	return fmt.Errorf("listening on %s over plain HTTP would send API keys and sandbox tokens in the clear; give --tls-cert and --tls-key, or listen on 127.0.0.1: %w", addr, sandbox.ErrInvalid)
}

// CheckListen refuses to serve beyond loopback without keys.
func CheckListen(addr string, keys *Keys) error {
	if keys.Len() > 0 {
		return nil
	}
	lo, err := loopback(addr)
	if err != nil || lo {
		return err
	}
	return fmt.Errorf("listening on %s without API keys would let anyone run code here; give --keys-file or AIRLOCK_API_KEYS, or listen on 127.0.0.1: %w", addr, sandbox.ErrInvalid)
}

// Routes lists every pattern the server's mux serves, as "METHOD
// PATTERN" ("PATTERN" alone for an Extra handler mounted for every
// method), in the order they were registered; the fallback that answers
// 404 to anything else is not among them.
func (s *Server) Routes() []string {
	out := make([]string, len(s.routes))
	for i, r := range s.routes {
		out[i] = strings.TrimSpace(r.Method + " " + r.Pattern)
	}
	return out
}

// handlerFunc is an API handler: it returns an error to be mapped to a
// status, or nil once it has written its answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request, t *Tenant) error

// handle registers an authenticated API route and its documentation.
func (s *Server) handle(method, pattern string, h handlerFunc, doc routeDoc) {
	s.routes = append(s.routes, route{Method: method, Pattern: pattern, Doc: doc})
	s.mux.Handle(method+" "+pattern, s.api(h))
}

// public registers a route that needs no key, and its documentation.
func (s *Server) public(method, pattern string, h http.HandlerFunc, doc routeDoc) {
	s.routes = append(s.routes, route{Method: method, Pattern: pattern, Public: true, Doc: doc})
	s.mux.Handle(method+" "+pattern, h)
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(api.HeaderRequestID)
	if !validRequestID(id) {
		id = newRequestID()
	}
	w.Header().Set(api.HeaderRequestID, id)
	rw := &statusWriter{ResponseWriter: w}
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			// no stack trace ever reaches a client; the log keeps it
			s.log.Error("panic serving a request", "request_id", id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !rw.wrote {
				writeError(rw, http.StatusInternalServerError, api.CodeInternal, "internal error (request "+id+")")
			}
		}
		s.log.Info("request", "request_id", id, "method", r.Method, "path", r.URL.Path, "status", rw.status,
			"tenant", rw.tenant, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	}()
	if r.URL.Query().Has("api_key") || r.URL.Query().Has("key") || r.URL.Query().Has("token") {
		writeError(rw, http.StatusBadRequest, api.CodeInvalid, "an API key in the URL would land in logs and proxies: send it as 'Authorization: Bearer KEY'")
		return
	}
	if s.e2b != nil && e2b.SandboxRequest(r) {
		if s.closing.Load() {
			writeError(rw, http.StatusServiceUnavailable, api.CodeUnavailable, "the server is shutting down")
			return
		}
		s.e2b.ServeHTTP(rw, r)
		return
	}
	s.mux.ServeHTTP(rw, r)
}

// e2bTenant authenticates an API key for the E2B surface, as the v1
// routes do; without keys every caller is DefaultTenant.
func (s *Server) e2bTenant(key string) (string, bool) {
	if s.opts.Keys == nil {
		return DefaultTenant, true
	}
	t, ok := s.opts.Keys.Lookup(key)
	if !ok {
		return "", false
	}
	return t.Name, true
}

// e2bAllow charges one E2B request to key's rate limit, the same bucket
// as the key's v1 requests.
func (s *Server) e2bAllow(key string) (time.Duration, bool) {
	lim := s.limiter(key)
	if lim.Allow() {
		return 0, true
	}
	r := lim.Reserve()
	d := r.Delay()
	r.Cancel()
	return d, false
}

// validRequestID accepts a caller's request id of sane length and
// characters, so that it can be logged as it is.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status and the tenant for the log.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	tenant string
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends what is buffered, for streams (the E2B surface's Connect
// streams need an http.Flusher).
func (w *statusWriter) Flush() {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// api wraps an API handler: authentication, the rate limit, shutdown,
// and the mapping of errors to statuses.
func (s *Server) api(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.closing.Load() {
			writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the server is shutting down")
			return
		}
		t, key, ok := s.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, "missing or unknown API key (send 'Authorization: Bearer KEY')")
			return
		}
		if sw, ok := w.(*statusWriter); ok {
			sw.tenant = t.Name
		}
		s.active.Add(1)
		defer s.active.Add(-1)
		if lim := s.limiter(key); !lim.Allow() {
			wait := lim.Reserve()
			d := wait.Delay()
			wait.Cancel()
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int((d+time.Second-1)/time.Second))))
			writeError(w, http.StatusTooManyRequests, api.CodeRateLimited, fmt.Sprintf("more than %g requests a second on this key", s.opts.RateLimit))
			return
		}
		if err := h(w, r, t); err != nil {
			s.fail(w, r, err)
		}
	})
}

// authenticate finds the request's tenant and the key it limits on.
func (s *Server) authenticate(r *http.Request) (*Tenant, string, bool) {
	if s.opts.Keys == nil {
		return &Tenant{Name: DefaultTenant}, DefaultTenant, true
	}
	key, ok := bearer(r)
	if !ok {
		return nil, "", false
	}
	t, ok := s.opts.Keys.Lookup(key)
	return t, key, ok
}

// bearer reads "Authorization: Bearer KEY".
func bearer(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(a, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", false
	}
	return strings.TrimSpace(key), true
}

// limiter is the token bucket of one key.
func (s *Server) limiter(key string) *rate.Limiter {
	if l, ok := s.limiters.Load(key); ok {
		return l.(*rate.Limiter)
	}
	l, _ := s.limiters.LoadOrStore(key, rate.NewLimiter(rate.Limit(s.opts.RateLimit), s.opts.RateBurst))
	return l.(*rate.Limiter)
}

// Shutdown makes the API answer 503 to new requests; the caller then
// waits for the calls in progress (Drain), stops the listener
// (http.Server.Shutdown) and closes the Manager.
func (s *Server) Shutdown() { s.closing.Store(true) }

// drainPoll is how often Drain looks at the calls in progress.
const drainPoll = 20 * time.Millisecond

// Drain waits until no API call is in progress, or ctx ends. Calls that
// arrive after Shutdown are answered 503 and not waited for. Meanwhile
// the listener stays open, so that a client sees the 503 and not a
// refused connection.
func (s *Server) Drain(ctx context.Context) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for s.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d calls still running: %w", s.active.Load(), context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}

// statusError is an error that carries its HTTP status and code.
type statusError struct {
	status int
	code   string
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func errorf(status int, code, format string, a ...any) error {
	return &statusError{status: status, code: code, msg: fmt.Sprintf(format, a...)}
}

// fail maps an error to its status and writes it: sentinels of sandbox and
// session map to their codes; anything else is a 500 whose detail goes
// to the log only.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var se *statusError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &se):
		writeError(w, se.status, se.code, se.msg)
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("the body is over %d bytes", mbe.Limit))
	case errors.Is(err, sandbox.ErrInvalid):
		writeError(w, http.StatusBadRequest, api.CodeInvalid, cleanMessage(err, sandbox.ErrInvalid))
	case errors.Is(err, sandbox.ErrNotFound):
		writeError(w, http.StatusNotFound, api.CodeNotFound, cleanMessage(err, sandbox.ErrNotFound))
	case errors.Is(err, session.ErrEnded), errors.Is(err, sandbox.ErrDestroyed), errors.Is(err, sandbox.ErrDied):
		writeError(w, http.StatusGone, api.CodeEnded, err.Error())
	case errors.Is(err, sandbox.ErrExist):
		writeError(w, http.StatusConflict, api.CodeConflict, cleanMessage(err, sandbox.ErrExist))
	case errors.Is(err, sandbox.ErrLimit):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, api.CodeLimit, cleanMessage(err, sandbox.ErrLimit))
	case errors.Is(err, sandbox.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// the client went away; nobody reads an answer
	default:
		id := w.Header().Get(api.HeaderRequestID)
		s.log.Error("request failed", "request_id", id, "err", err)
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "internal error (request "+id+"): "+err.Error())
	}
}

// cleanMessage drops the sentinel's own text from the end of a message,
// so that it says its cause once.
func cleanMessage(err, sentinel error) string {
	return strings.TrimSuffix(err.Error(), ": "+sentinel.Error())
}

// writeError writes the JSON error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.Error{Code: code, Message: msg})
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a JSON body into v, strictly: unknown fields and
// trailing data are errors, the body is capped, and a client that sends
// it too slowly is cut off.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxJSONBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return errorf(http.StatusRequestTimeout, api.CodeTimeout, "the body did not arrive within %v", s.opts.BodyTimeout)
		}
		if errors.Is(err, io.EOF) {
			return errorf(http.StatusBadRequest, api.CodeInvalid, "the request needs a JSON body")
		}
		return errorf(http.StatusBadRequest, api.CodeInvalid, "the body is not valid JSON for this request: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, api.CodeInvalid, "the body holds more than one JSON value")
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return nil
}

// seconds turns a count of seconds from a request into a Duration,
// refusing negative, fractional-infinite and huge ones.
func seconds(name string, v float64) (time.Duration, error) {
	if v < 0 || v != v || v > 7*24*3600 {
		return 0, errorf(http.StatusBadRequest, api.CodeInvalid, "%s %g: want 0 to 604800", name, v)
	}
	return time.Duration(v * float64(time.Second)), nil
}
