// Package api holds the wire types of airlock's HTTP API, v1: the bodies
// the server reads and writes and the Go SDK (package client) sends and
// receives. It imports nothing of airlock's but package sandbox, so that a
// client never links a backend or the server.
package api

import (
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Media types.
const (
	ContentJSON   = "application/json"
	ContentNDJSON = "application/x-ndjson"
)

// HeaderVerdict and HeaderReason carry the artifact filter's verdict on a
// downloaded file; HeaderRequestID names a request in the server's logs.
const (
	HeaderVerdict   = "X-Airlock-Verdict"
	HeaderReason    = "X-Airlock-Reason"
	HeaderRequestID = "X-Request-Id"
)

// Error is the body of every failed request.
type Error struct {
	// Code is one of the Code* constants.
	Code string `json:"code"`
	// Message says what went wrong, for a person.
	Message string `json:"message"`
	// Status is the HTTP status that carried the error. It is not part of
	// the body: the Go client sets it from the response.
	Status int `json:"-"`
	// RetryAfter is the wait a Retry-After header asked for (with 429 and
	// 503), zero when there was none. The Go client sets it.
	RetryAfter time.Duration `json:"-"`
}

// Error says the code and the message.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is makes errors.Is match an Error against the sentinel of its code:
// ErrUnauthorized, ErrRejected, ErrEnded, ErrTooLarge, ErrRateLimited,
// ErrTimeout, ErrUnavailable and ErrInternal, and package sandbox's
// ErrInvalid, ErrNotFound, ErrExist, ErrLimit and ErrUnsupported for the
// codes that the server maps from them.
func (e *Error) Is(target error) bool {
	s, ok := codeSentinels[e.Code]
	return ok && s == target
}

// Sentinels of the error codes that package sandbox has none for; an
// *Error matches the one of its code (see Error.Is).
var (
	ErrUnauthorized = errors.New("unauthorized")
	ErrRejected     = errors.New("rejected by the artifact filter")
	ErrEnded        = errors.New("session ended")
	ErrTooLarge     = errors.New("request too large")
	ErrRateLimited  = errors.New("rate limited")
	ErrTimeout      = errors.New("request timed out")
	ErrUnavailable  = errors.New("server unavailable")
	ErrInternal     = errors.New("internal server error")
)

var codeSentinels = map[string]error{
	CodeInvalid:      sandbox.ErrInvalid,
	CodeUnauthorized: ErrUnauthorized,
	CodeForbidden:    ErrRejected,
	CodeNotFound:     sandbox.ErrNotFound,
	CodeConflict:     sandbox.ErrExist,
	CodeEnded:        ErrEnded,
	CodeTooLarge:     ErrTooLarge,
	CodeLimit:        sandbox.ErrLimit,
	CodeRateLimited:  ErrRateLimited,
	CodeTimeout:      ErrTimeout,
	CodeUnsupported:  sandbox.ErrUnsupported,
	CodeUnavailable:  ErrUnavailable,
	CodeInternal:     ErrInternal,
}

// StatusOf is the HTTP status that carries code; 500 for a code it does
// not know.
func StatusOf(code string) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return 500
}

var codeStatus = map[string]int{
	CodeInvalid: 400, CodeUnauthorized: 401, CodeForbidden: 403, CodeNotFound: 404,
	CodeTimeout: 408, CodeConflict: 409, CodeEnded: 410, CodeTooLarge: 413, CodeLimit: 429,
	CodeRateLimited: 429, CodeInternal: 500, CodeUnsupported: 501, CodeUnavailable: 503,
}

// Error codes and the HTTP statuses that carry them.
const (
	CodeInvalid      = "invalid"      // 400
	CodeUnauthorized = "unauthorized" // 401
	CodeForbidden    = "forbidden"    // 403: an artifact the filter rejected
	CodeNotFound     = "not_found"    // 404
	CodeTimeout      = "timeout"      // 408: the body did not arrive in time
	CodeConflict     = "conflict"     // 409: already exists
	CodeEnded        = "ended"        // 410: the session existed and ended
	CodeTooLarge     = "too_large"    // 413
	CodeLimit        = "limit"        // 429: a quota or cap is full
	CodeRateLimited  = "rate_limited" // 429: too many requests
	CodeUnsupported  = "unsupported"  // 501
	CodeUnavailable  = "unavailable"  // 503: the server is shutting down
	CodeInternal     = "internal"     // 500
)

// CreateSession is the body of POST /v1/sessions.
type CreateSession struct {
	Backend            string            `json:"backend,omitempty"`
	Image              string            `json:"image,omitempty"`
	Policy             *sandbox.Policy   `json:"policy,omitempty"`
	TTLSeconds         float64           `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds float64           `json:"idle_timeout_seconds,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
}

// Session describes one session.
type Session struct {
	ID                 string            `json:"id"`
	Backend            string            `json:"backend"`
	Image              string            `json:"image"`
	Created            time.Time         `json:"created"`
	ExpiresAt          time.Time         `json:"expires_at"`
	LastUsed           time.Time         `json:"last_used"`
	IdleTimeoutSeconds float64           `json:"idle_timeout_seconds"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	Limits             sandbox.Limits    `json:"limits"`
	Pooled             bool              `json:"pooled"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// SetTTL is the body of POST /v1/sessions/{id}/ttl.
type SetTTL struct {
	TTLSeconds float64 `json:"ttl_seconds"`
}

// Exec is the body of POST /v1/sessions/{id}/exec.
type Exec struct {
	Cmd            []string          `json:"cmd"`
	Stdin          string            `json:"stdin,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Dir            string            `json:"dir,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	// Background starts the process and answers at once with its Process;
	// its stdin stays open for POST .../processes/{pid}/stdin.
	Background bool `json:"background,omitempty"`
}

// Process describes a background process.
type Process struct {
	ID      string          `json:"id"`
	Cmd     []string        `json:"cmd"`
	Started time.Time       `json:"started"`
	Running bool            `json:"running"`
	Result  *sandbox.Result `json:"result,omitempty"`
}

// ProcessList is the body of GET /v1/sessions/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// Signal is the body of POST /v1/sessions/{id}/processes/{pid}/signal.
type Signal struct {
	// Signal is a name such as "SIGINT" or "KILL", or a number.
	Signal string `json:"signal"`
}

// Stream event types of exec and code streams (NDJSON, one per line).
const (
	EventStdout    = "stdout"
	EventStderr    = "stderr"
	EventResult    = "result"  // exec: the Result; code: the value of the last expression
	EventDisplay   = "display" // code: a figure or other rich output shown during the call
	EventError     = "error"   // code: an exception; both: a failure of airlock's (Error set)
	EventEnd       = "end"     // code: the call ended
	EventRestarted = "restarted"
	EventKeepalive = "keepalive"
)

// ExecEvent is one line of an exec stream.
type ExecEvent struct {
	Type   string          `json:"type"`
	Data   string          `json:"data,omitempty"`
	Result *sandbox.Result `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Code is the body of POST /v1/sessions/{id}/code.
type Code struct {
	Code string `json:"code"`
	// Language is python (the default), javascript or bash.
	Language string `json:"language,omitempty"`
	// Context names the interpreter context; "" is the language's default
	// context, made on first use.
	Context        string  `json:"context,omitempty"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// CodeEvent is one line of a code stream, or one of a CodeResult's events.
type CodeEvent struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// Data is a MIME bundle: text/plain, text/html, image/png (base64),
	// application/json…
	Data           map[string]string `json:"data,omitempty"`
	Name           string            `json:"name,omitempty"`
	Value          string            `json:"value,omitempty"`
	Traceback      []string          `json:"traceback,omitempty"`
	ExecutionCount int               `json:"execution_count,omitempty"`
	DurationMS     float64           `json:"duration_ms,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	Error          *Error            `json:"error,omitempty"`
}

// CodeResult is the answer to a code call made without a stream.
type CodeResult struct {
	Context        string      `json:"context"`
	Events         []CodeEvent `json:"events"`
	ExecutionCount int         `json:"execution_count"`
	DurationMS     float64     `json:"duration_ms"`
	Interrupted    bool        `json:"interrupted"`
	Restarted      bool        `json:"restarted"`
}

// CreateContext is the body of POST /v1/sessions/{id}/contexts.
type CreateContext struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

// Context describes one interpreter context.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// ContextList is the body of GET /v1/sessions/{id}/contexts.
type ContextList struct {
	Contexts []Context `json:"contexts"`
}

// FileList is the body of GET on a folder under /v1/sessions/{id}/files/.
type FileList struct {
	Files []sandbox.FileInfo `json:"files"`
}

// ArtifactList is the body of GET /v1/sessions/{id}/artifacts.
type ArtifactList struct {
	Artifacts []sandbox.Artifact `json:"artifacts"`
}

// AuditRecord is one entry of the audit log.
type AuditRecord struct {
	ID           int64     `json:"id"`
	Time         time.Time `json:"time"`
	Tenant       string    `json:"tenant"`
	Kind         string    `json:"kind"`
	Session      string    `json:"session,omitempty"`
	Backend      string    `json:"backend,omitempty"`
	What         string    `json:"what,omitempty"`
	ExitCode     int       `json:"exit_code,omitempty"`
	TimedOut     bool      `json:"timed_out,omitempty"`
	OOMKilled    bool      `json:"oom_killed,omitempty"`
	PidsLimitHit bool      `json:"pids_limit_hit,omitempty"`
	DurationMS   float64   `json:"duration_ms,omitempty"`
	Bytes        int64     `json:"bytes,omitempty"`
	Detail       string    `json:"detail,omitempty"`
}

// AuditList is the body of GET /v1/audit.
type AuditList struct {
	Records []AuditRecord `json:"records"`
	// Next is the cursor of the next page (the after parameter); 0 when
	// this is the last page.
	Next int64 `json:"next,omitempty"`
}
