package e2b

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// Ports of a sandbox that the SDKs reach, as they name them in
// E2b-Sandbox-Port.
const (
	EnvdPort    = "49983"
	JupyterPort = "49999"
)

// EnvdVersion is the envd version airlock reports. The SDKs turn features
// on and off by it; 0.5.7 is the newest whose features airlock has.
const EnvdVersion = "0.5.7"

// Home is where relative paths of the envd surface lead and where
// commands start when they name no folder: the sandbox's HOME. /home/user,
// E2B's home, does not exist here: the root is read-only and only /tmp,
// /workspace/output and /workspace/input hold files.
const Home = "/tmp"

// Options configure a Handler.
type Options struct {
	// Manager runs the sandboxes, as sessions.
	Manager *session.Manager
	// Authenticate finds the tenant of an API key; ok false refuses it.
	Authenticate func(key string) (tenant string, ok bool)
	// Allow charges one request to the rate limit of key (an API key, or
	// the key a sandbox's token was handed out to) and says how long to
	// wait when its budget is spent; nil allows everything.
	Allow func(key string) (wait time.Duration, ok bool)
	// Identified, when set, hears the tenant of each authenticated request,
	// with the request's ResponseWriter: for the server's request log.
	Identified func(w http.ResponseWriter, tenant string)
	// Templates maps E2B template names to airlock image names; nil means
	// DefaultTemplates. A template that is not listed names an image.
	Templates map[string]string
	// Backend is the backend of E2B sandboxes; "" is the Manager's default.
	Backend string
	// Policy is the base policy of E2B sandboxes; a request adds its
	// environment variables and egress allowlist.
	Policy sandbox.Policy
	// DefaultTimeout is a sandbox's lifetime when the request gives none;
	// 0 means 300 s, as E2B's.
	DefaultTimeout time.Duration
	// Logger receives what goes wrong; nil discards it.
	Logger *slog.Logger
}

// DefaultTemplates are the E2B templates airlock knows: both run the
// built-in python image (Python with its data packages, Node.js, bash).
func DefaultTemplates() map[string]string {
	return map[string]string{"base": "python", "code-interpreter-v1": "python"}
}

// Handler serves the E2B-compatible surface.
type Handler struct {
	opts    Options
	log     *slog.Logger
	grants  *grants
	control *http.ServeMux
	envd    *http.ServeMux
	jupyter *http.ServeMux
	procs   *processes
	defs    defaults
}

// New returns a Handler.
func New(opts Options) (*Handler, error) {
	if opts.Manager == nil || opts.Authenticate == nil {
		return nil, fmt.Errorf("e2b: a session manager and an authenticator are needed: %w", sandbox.ErrInvalid)
	}
	if opts.Templates == nil {
		opts.Templates = DefaultTemplates()
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 300 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, log: opts.Logger, grants: newGrants(), procs: newProcesses()}
	h.control = h.controlRoutes()
	h.envd = h.envdRoutes()
	h.jupyter = h.jupyterRoutes()
	return h, nil
}

// Patterns are the paths to route to the Handler on a mux that also
// serves other things; requests for a sandbox (SandboxRequest) must reach
// it whatever their path.
func Patterns() []string {
	return []string{"/v2/sandboxes", "/v2/sandboxes/", "/sandboxes", "/sandboxes/", "/files"}
}

// hostRoute matches a Host of the form PORT-ID.DOMAIN, how the SDKs name a
// sandbox's port when only E2B_DOMAIN is set.
var hostRoute = regexp.MustCompile(`^([0-9]{1,5})-([0-9a-zA-Z]{1,64})\.`)

// route tells which sandbox and port a request is for, from the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers or the Host.
func route(r *http.Request) (id, port string, ok bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port := r.Header.Get("E2b-Sandbox-Port")
		if port == "" {
			port = EnvdPort
		}
		return id, port, true
	}
	if m := hostRoute.FindStringSubmatch(r.Host); m != nil {
		return m[2], m[1], true
	}
	return "", "", false
}

// SandboxRequest tells whether r is for a sandbox's envd or code
// interpreter rather than the control plane.
func SandboxRequest(r *http.Request) bool {
	_, _, ok := route(r)
	return ok
}

// ServeHTTP serves the control plane, or a sandbox's port.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, port, ok := route(r); ok {
		h.serveSandbox(w, r, id, port)
		return
	}
	if signedFile(r) {
		h.serveSigned(w, r)
		return
	}
	h.control.ServeHTTP(w, r)
}

// apiKey reads the API key of a control plane request: X-API-KEY, as the
// SDKs send it, or "Authorization: Bearer KEY".
func apiKey(r *http.Request) string {
	if k := r.Header.Get("X-API-KEY"); k != "" {
		return strings.TrimSpace(k)
	}
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(key)
	}
	return ""
}

// caller is who a request comes from: a tenant, and the key its requests
// are rate-limited on.
type caller struct {
	tenant   string
	limitKey string
}

// identified tells Options.Identified who a request comes from.
func (h *Handler) identified(w http.ResponseWriter, c caller) {
	if h.opts.Identified != nil {
		h.opts.Identified(w, c.tenant)
	}
}

// allow charges a request to c's rate limit, writing the answer when the
// budget is spent.
func (h *Handler) allow(c caller) (time.Duration, bool) {
	if h.opts.Allow == nil {
		return 0, true
	}
	return h.opts.Allow(c.limitKey)
}

// retryAfter renders a wait as whole seconds, at least one.
func retryAfter(d time.Duration) string {
	return fmt.Sprint(max(1, int((d+time.Second-1)/time.Second)))
}
