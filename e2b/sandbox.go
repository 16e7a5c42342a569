package e2b

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/airlock-sandbox/airlock/session"
)

// sandboxKey is the context key of a sandbox request's sandboxCall.
type sandboxKey struct{}

// sandboxCall is what a sandbox request was authorized for.
type sandboxCall struct {
	sess   *session.Session
	caller caller
}

// callOf reads the sandboxCall that serveSandbox put in ctx.
func callOf(ctx context.Context) *sandboxCall {
	sc, _ := ctx.Value(sandboxKey{}).(*sandboxCall)
	return sc
}

// isRPC tells whether a path is one of envd's Connect services'.
func isRPC(path string) bool {
	return strings.HasPrefix(path, "/process.Process/") || strings.HasPrefix(path, "/filesystem.Filesystem/")
}

// sandboxError writes a refusal of a sandbox request in the shape its
// client reads: a Connect error for envd's services, E2B's JSON else.
func sandboxError(w http.ResponseWriter, r *http.Request, status int, code connect.Code, msg string) {
	if isRPC(r.URL.Path) {
		// A Connect error body, which the SDKs' Connect client reads for
		// unary and streaming calls alike when the status is not 200.
		writeJSON(w, status, map[string]string{"code": code.String(), "message": msg})
		return
	}
	writeError(w, status, msg)
}

// authorize finds who a sandbox request comes from and the session it
// may reach. The sandbox's access token (X-Access-Token, or
// E2B-Traffic-Access-Token that the code interpreter's context calls
// send) authorizes that one sandbox; an API key authorizes its tenant's.
// Nothing else does: a request with neither, a token of another sandbox,
// or a key of another tenant is refused the same way whether or not the
// sandbox exists.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, id string, gr *grant) (*sandboxCall, bool) {
	var c caller
	switch token := accessToken(r); {
	case gr != nil:
		c = caller{tenant: gr.tenant, limitKey: gr.limitKey}
	case token != "":
		g, ok := h.grants.check(id, token)
		if !ok {
			sandboxError(w, r, http.StatusUnauthorized, connect.CodeUnauthenticated, "the access token is not this sandbox's")
			return nil, false
		}
		gr = g
		c = caller{tenant: g.tenant, limitKey: g.limitKey}
	default:
		key := apiKey(r)
		tenant, ok := h.opts.Authenticate(key)
		if key == "" || !ok {
			sandboxError(w, r, http.StatusUnauthorized, connect.CodeUnauthenticated,
				"missing or unknown credentials: send the sandbox's access token (X-Access-Token) or an API key (X-API-KEY)")
			return nil, false
		}
		c = caller{tenant: tenant, limitKey: key}
	}
	h.identified(w, c)
	if wait, ok := h.allow(c); !ok {
		w.Header().Set("Retry-After", retryAfter(wait))
		sandboxError(w, r, http.StatusTooManyRequests, connect.CodeResourceExhausted, "too many requests on this API key")
		return nil, false
	}
	s, err := h.opts.Manager.Get(c.tenant, id)
	switch {
	case err == nil:
		return &sandboxCall{sess: s, caller: c}, true
	case gr != nil || errors.Is(err, session.ErrEnded):
		// The caller holds this sandbox's token (or key) and the sandbox is
		// gone: 502, which the SDKs read as "the sandbox is not running".
		sandboxError(w, r, http.StatusBadGateway, connect.CodeUnavailable, "sandbox "+id+" is not running: "+err.Error())
	default:
		sandboxError(w, r, http.StatusNotFound, connect.CodeNotFound, "sandbox "+id+" not found")
	}
	return nil, false
}

// accessToken reads the sandbox access token the SDKs send.
func accessToken(r *http.Request) string {
	if t := r.Header.Get("X-Access-Token"); t != "" {
		return strings.TrimSpace(t)
	}
	return strings.TrimSpace(r.Header.Get("E2B-Traffic-Access-Token"))
}

// serveSandbox serves one port of a sandbox.
func (h *Handler) serveSandbox(w http.ResponseWriter, r *http.Request, id, port string) {
	var next http.Handler
	switch port {
	case EnvdPort:
		next = h.envd
	case JupyterPort:
		next = h.jupyter
	default:
		writeError(w, http.StatusBadGateway, "airlock reaches only envd's port ("+EnvdPort+") and the code interpreter's ("+JupyterPort+") of a sandbox, not "+port)
		return
	}
	var gr *grant
	if signedFile(r) && accessToken(r) == "" {
		// A signed URL on a PORT-ID.DOMAIN host: the signature must be
		// this sandbox's.
		if gr = h.checkSignature(r, id); gr == nil {
			writeError(w, http.StatusUnauthorized, badSignature)
			return
		}
	}
	sc, ok := h.authorize(w, r, id, gr)
	if !ok {
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxKey{}, sc)))
}

// signedFile tells whether r is a file transfer that carries a signature.
func signedFile(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Has("signature")
}

const badSignature = "the signature is not valid for this file and operation, or it expired"

// checkSignature finds the grant whose token signed r (of sandbox id, or
// of any sandbox with id ""), or nil.
func (h *Handler) checkSignature(r *http.Request, id string) *grant {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	gr, ok := h.grants.signed(id, q.Get("path"), op, q.Get("username"), q.Get("signature"), q.Get("signature_expiration"), time.Now())
	if !ok {
		return nil
	}
	return gr
}

// serveSigned serves a file URL made by the SDKs' uploadUrl or
// downloadUrl: it names no sandbox, so the signature, made with one
// sandbox's token, says which.
func (h *Handler) serveSigned(w http.ResponseWriter, r *http.Request) {
	gr := h.checkSignature(r, "")
	if gr == nil {
		writeError(w, http.StatusUnauthorized, badSignature)
		return
	}
	sc, ok := h.authorize(w, r, gr.id, gr)
	if !ok {
		return
	}
	h.envd.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxKey{}, sc)))
}

// errNoSandbox is the error of a handler reached without serveSandbox.
var errNoSandbox = errors.New("e2b: the request reached a sandbox handler without a sandbox")

// current is the session of a sandbox request.
func current(ctx context.Context) (*session.Session, error) {
	sc := callOf(ctx)
	if sc == nil {
		return nil, errNoSandbox
	}
	return sc.sess, nil
}
