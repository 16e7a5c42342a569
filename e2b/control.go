package e2b

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// controlRoutes mounts the control plane: the routes the SDKs call, and a
// clear "unsupported" for the E2B features airlock does not have (a 404
// there would read as "sandbox not found").
func (h *Handler) controlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /v2/sandboxes", h.api(h.create))
	mux.Handle("POST /sandboxes", h.api(h.create))
	mux.Handle("GET /v2/sandboxes", h.api(h.list))
	mux.Handle("GET /sandboxes", h.api(h.list))
	mux.Handle("GET /sandboxes/{id}", h.api(h.info))
	mux.Handle("DELETE /sandboxes/{id}", h.api(h.kill))
	mux.Handle("POST /sandboxes/{id}/timeout", h.api(h.setTimeout))
	mux.Handle("POST /v2/sandboxes/{id}/connect", h.api(h.connect))
	mux.Handle("POST /sandboxes/{id}/connect", h.api(h.connect))
	mux.Handle("POST /sandboxes/{id}/refreshes", h.api(h.refresh))
	for _, p := range []string{"POST /sandboxes/{id}/pause", "POST /sandboxes/{id}/resume", "POST /sandboxes/{id}/fork",
		"POST /sandboxes/{id}/snapshots", "GET /sandboxes/{id}/metrics", "GET /sandboxes/metrics",
		"PUT /sandboxes/{id}/network", "GET /sandboxes/{id}/logs", "GET /v2/sandboxes/{id}/logs"} {
		what := p
		mux.Handle(p, h.api(func(w http.ResponseWriter, r *http.Request, c caller) error {
			return httpError(http.StatusNotImplemented, "airlock does not offer "+what+" of E2B's API")
		}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "airlock does not offer "+r.Method+" "+r.URL.Path+" of E2B's API")
	})
	return mux
}

// controlFunc is a control plane handler for an authenticated caller.
type controlFunc func(w http.ResponseWriter, r *http.Request, c caller) error

// api authenticates a control plane request with its API key, charges
// the key's rate limit and maps the handler's error.
func (h *Handler) api(f controlFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := apiKey(r)
		tenant, ok := h.opts.Authenticate(key)
		if !ok {
			writeError(w, http.StatusUnauthorized, "missing or unknown API key (send it as X-API-KEY, E2B_API_KEY in the SDKs)")
			return
		}
		c := caller{tenant: tenant, limitKey: key}
		if key == "" {
			c.limitKey = tenant
		}
		h.identified(w, c)
		if wait, ok := h.allow(c); !ok {
			w.Header().Set("Retry-After", retryAfter(wait))
			writeError(w, http.StatusTooManyRequests, "too many requests on this API key")
			return
		}
		if err := f(w, r, c); err != nil {
			h.fail(w, r, err)
		}
	})
}

// maxBody bounds a control plane request body.
const maxBody = 1 << 20

// readBody decodes a JSON body into v; an empty body leaves v as it is.
// Fields airlock does not know are ignored, as the SDKs send more than
// airlock reads.
func readBody(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return httpError(http.StatusBadRequest, "reading the body: "+err.Error())
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return httpError(http.StatusBadRequest, "the body is not valid JSON for this request: "+err.Error())
	}
	return nil
}

// newSandbox is the body of POST /v2/sandboxes; the fields the SDKs send
// that airlock cannot honour are refused when set.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	EnvVars             map[string]string `json:"envVars"`
	Metadata            map[string]string `json:"metadata"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *network          `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	IAM                 json.RawMessage   `json:"iam"`
}

// network is E2B's egress setting.
type network struct {
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
}

// allTraffic is E2B's name for every IPv4 address.
const allTraffic = "0.0.0.0/0"

// set tells whether a raw JSON field carries a value.
func set(m json.RawMessage) bool {
	s := strings.TrimSpace(string(m))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

// egressRules turns E2B's network setting into airlock's allowlist.
// airlock denies what is not allowed, so a denyOut of all traffic (E2B's
// way to say "only allowOut") is what it does anyway; other deny rules,
// and an open internet, it does not offer.
func egressRules(req newSandbox) ([]sandbox.EgressRule, error) {
	if req.AllowInternetAccess != nil && *req.AllowInternetAccess && (req.Network == nil || len(req.Network.AllowOut) == 0) {
		return nil, httpError(http.StatusBadRequest, "airlock opens no internet to a sandbox: name the hosts it may reach in network.allowOut")
	}
	n := req.Network
	if n == nil {
		return nil, nil
	}
	if set(n.Rules) || set(n.EgressProxy) {
		return nil, httpError(http.StatusBadRequest, "airlock has no network rules or egress proxies of E2B's; network.allowOut names what a sandbox may reach")
	}
	for _, d := range n.DenyOut {
		if d != allTraffic {
			return nil, httpError(http.StatusBadRequest, fmt.Sprintf("network.denyOut %q: airlock denies everything that allowOut does not name, and takes no other deny rules", d))
		}
	}
	var rules []sandbox.EgressRule
	for _, a := range n.AllowOut {
		if _, _, err := net.ParseCIDR(a); err == nil {
			rules = append(rules, sandbox.EgressRule{CIDR: a})
			continue
		}
		if ip := net.ParseIP(a); ip != nil {
			bits := "/32"
			if ip.To4() == nil {
				bits = "/128"
			}
			rules = append(rules, sandbox.EgressRule{CIDR: a + bits})
			continue
		}
		rules = append(rules, sandbox.EgressRule{Host: a})
	}
	return rules, nil
}

// sandboxCreated is the answer to a create or a connect.
type sandboxCreated struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// clientID is what airlock reports as E2B's (deprecated) client id.
const clientID = "airlock"

func created(gr *grant) sandboxCreated {
	return sandboxCreated{SandboxID: gr.id, TemplateID: gr.template, Alias: gr.template, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: gr.token, TrafficAccessToken: gr.token}
}

// timeoutOf reads a request's timeout in seconds.
func timeoutOf(v *int64, def time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	if *v <= 0 || *v > 7*24*3600 {
		return 0, httpError(http.StatusBadRequest, fmt.Sprintf("timeout %d: want 1 to 604800 seconds", *v))
	}
	return time.Duration(*v) * time.Second, nil
}

// maxMetadata bounds a sandbox's metadata, as v1 does.
const maxMetadata = 64

func (h *Handler) create(w http.ResponseWriter, r *http.Request, c caller) error {
	var req newSandbox
	if err := readBody(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.TemplateID == "":
		return httpError(http.StatusBadRequest, "templateID is required")
	case req.AutoPause != nil && *req.AutoPause, set(req.AutoResume):
		return httpError(http.StatusBadRequest, "airlock cannot pause sandboxes: autoPause and autoResume are not offered")
	case set(req.MCP):
		return httpError(http.StatusBadRequest, "airlock has no MCP gateway in its sandboxes")
	case set(req.VolumeMounts):
		return httpError(http.StatusBadRequest, "airlock has no volumes")
	case set(req.IAM):
		return httpError(http.StatusBadRequest, "airlock has no workload identity tokens")
	case len(req.Metadata) > maxMetadata:
		return httpError(http.StatusBadRequest, fmt.Sprintf("metadata: more than %d entries", maxMetadata))
	}
	for k, v := range req.Metadata {
		if len(k) > 256 || len(v) > 4096 {
			return httpError(http.StatusBadRequest, fmt.Sprintf("metadata %.40q: keys up to 256 bytes, values up to 4096", k))
		}
	}
	img, ok := h.opts.Templates[req.TemplateID]
	if !ok {
		if strings.ContainsAny(req.TemplateID, "/\\") || strings.HasPrefix(req.TemplateID, ".") {
			return httpError(http.StatusBadRequest, fmt.Sprintf("template %q: want a template or image name", req.TemplateID))
		}
		img = req.TemplateID
	}
	ttl, err := timeoutOf(req.Timeout, h.opts.DefaultTimeout)
	if err != nil {
		return err
	}
	rules, err := egressRules(req)
	if err != nil {
		return err
	}
	pol := h.opts.Policy
	pol.Env = mergeEnv(pol.Env, req.EnvVars)
	pol.Network.Allow = append(append([]sandbox.EgressRule(nil), pol.Network.Allow...), rules...)
	sess, err := h.opts.Manager.Create(r.Context(), session.CreateOptions{Owner: c.tenant, Backend: h.opts.Backend, Image: img,
		Policy: pol, TTL: ttl, IdleTimeout: h.opts.Manager.MaxTTL(), Metadata: req.Metadata})
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return httpError(http.StatusNotFound, fmt.Sprintf("template %q not found: %v", req.TemplateID, err))
		}
		return err
	}
	h.pruneSoon()
	writeJSON(w, http.StatusCreated, created(h.grants.issue(sess.ID(), req.TemplateID, c)))
	return nil
}

// mergeEnv adds req's variables to base's; req wins.
func mergeEnv(base, req map[string]string) map[string]string {
	if len(base) == 0 && len(req) == 0 {
		return nil
	}
	out := make(map[string]string, len(base)+len(req))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range req {
		out[k] = v
	}
	return out
}

// pruneSoon forgets, now and then, the grants and pid tables of the
// sandboxes the Manager has forgotten. It runs on each create.
func (h *Handler) pruneSoon() {
	gone := func(id, tenant string) bool {
		_, err := h.opts.Manager.Get(tenant, id)
		return errors.Is(err, sandbox.ErrNotFound)
	}
	h.grants.prune(func(gr *grant) bool { return gone(gr.id, gr.tenant) })
	ended := func(id, owner string) bool {
		_, err := h.opts.Manager.Get(owner, id)
		return err != nil
	}
	h.procs.prune(ended)
	h.forgetDefaults(ended)
}

// session finds caller's sandbox id.
func (h *Handler) session(c caller, id string) (*session.Session, error) {
	s, err := h.opts.Manager.Get(c.tenant, id)
	if err != nil {
		return nil, httpError(http.StatusNotFound, fmt.Sprintf("sandbox %s not found", id))
	}
	return s, nil
}

// templateOf is the template a sandbox was made from: the E2B template
// named at create, or, for a session made through v1, its image.
func (h *Handler) templateOf(s *session.Session) string {
	if gr := h.grants.get(s.ID()); gr != nil && gr.tenant == s.Owner() {
		return gr.template
	}
	return s.Info().Image
}

// extend makes s live at least secs (the default timeout when nil) from
// now; it never shortens its life.
func (h *Handler) extend(s *session.Session, secs *int64) error {
	ttl, err := timeoutOf(secs, h.opts.DefaultTimeout)
	if err != nil {
		return err
	}
	if time.Now().Add(ttl).After(s.Info().ExpiresAt) {
		return s.SetTTL(ttl)
	}
	return nil
}

// sessionBody finds the caller's sandbox of the path and reads the body.
func (h *Handler) sessionBody(w http.ResponseWriter, r *http.Request, c caller, v any) (*session.Session, error) {
	s, err := h.session(c, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return s, readBody(w, r, v)
}

type connectBody struct {
	Timeout *int64 `json:"timeout"`
}

// connect hands out a sandbox's token, extending its life to the timeout
// asked (300 s by default) when that is later than its end.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, c caller) error {
	var req connectBody
	s, err := h.sessionBody(w, r, c, &req)
	if err != nil {
		return err
	}
	if err := h.extend(s, req.Timeout); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, created(h.grants.issue(s.ID(), h.templateOf(s), c)))
	return nil
}

func (h *Handler) refresh(w http.ResponseWriter, r *http.Request, c caller) error {
	var req struct {
		Duration *int64 `json:"duration"`
	}
	s, err := h.sessionBody(w, r, c, &req)
	if err != nil {
		return err
	}
	if err := h.extend(s, req.Duration); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, c caller) error {
	var req connectBody
	s, err := h.sessionBody(w, r, c, &req)
	if err != nil {
		return err
	}
	if req.Timeout == nil {
		return httpError(http.StatusBadRequest, "timeout is required")
	}
	ttl, err := timeoutOf(req.Timeout, 0)
	if err != nil {
		return err
	}
	if err := s.SetTTL(ttl); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	if _, err := h.session(c, id); err != nil {
		return err
	}
	if err := h.opts.Manager.Destroy(r.Context(), c.tenant, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sandboxInfo describes a sandbox in a listing or a getInfo.
type sandboxInfo struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	EnvdVersion     string            `json:"envdVersion"`
	Metadata        map[string]string `json:"metadata"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
}

func (h *Handler) describe(s *session.Session, i session.Info) sandboxInfo {
	md := i.Metadata
	if md == nil {
		md = map[string]string{}
	}
	tpl := h.templateOf(s)
	return sandboxInfo{SandboxID: i.ID, TemplateID: tpl, Alias: tpl, ClientID: clientID, StartedAt: i.Created.UTC(),
		EndAt: i.ExpiresAt.UTC(), State: "running", CPUCount: max(1, int(i.Limits.CPUs+0.999)),
		MemoryMB: i.Limits.MemoryBytes >> 20, DiskSizeMB: i.Limits.DiskBytes >> 20, EnvdVersion: EnvdVersion, Metadata: md}
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request, c caller) error {
	s, err := h.session(c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.describe(s, s.Info()))
	return nil
}

// List paging: at most maxPage sandboxes a page; the next page's token is
// the position of the last one listed, opaque to the client.
const (
	defaultPage = 100
	maxPage     = 1000
)

// pageToken encodes a position in the listing order (created, id).
func pageToken(i session.Info) string { return pageTokenOf(i.Created, i.ID) }

func pageTokenOf(created time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created.UnixNano(), 10) + "." + id))
}

func parsePageToken(tok string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		ns, id, ok := strings.Cut(string(b), ".")
		if n, perr := strconv.ParseInt(ns, 10, 64); ok && perr == nil {
			return n, id, nil
		}
	}
	return 0, "", httpError(http.StatusBadRequest, "nextToken: not a token this server gave")
}

// metadataQuery reads the SDKs' metadata filter: key=value pairs, each
// escaped, joined as a query string.
func metadataQuery(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	q, err := url.ParseQuery(v)
	if err != nil {
		return nil, httpError(http.StatusBadRequest, "metadata: "+err.Error())
	}
	out := map[string]string{}
	for k, vs := range q {
		uk, err1 := url.QueryUnescape(k)
		uv, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, httpError(http.StatusBadRequest, "metadata: bad escape")
		}
		out[uk] = uv
	}
	return out, nil
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	limit := defaultPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return httpError(http.StatusBadRequest, fmt.Sprintf("limit %q: want 1 to %d", v, maxPage))
		}
		limit = n
	}
	md, err := metadataQuery(q.Get("metadata"))
	if err != nil {
		return err
	}
	running := true
	if states := q["state"]; len(states) > 0 {
		running = false
		for _, st := range states {
			for _, s := range strings.Split(st, ",") {
				running = running || s == "running"
			}
		}
	}
	var afterNS int64
	var afterID string
	if tok := q.Get("nextToken"); tok != "" {
		if afterNS, afterID, err = parsePageToken(tok); err != nil {
			return err
		}
	}
	tpl := q.Get("template")
	out := []sandboxInfo{}
	var last session.Info
	more := false
	if running {
		infos := h.opts.Manager.List(c.tenant)
		sort.SliceStable(infos, func(i, j int) bool {
			a, b := infos[i].Created.UnixNano(), infos[j].Created.UnixNano()
			return a < b || a == b && infos[i].ID < infos[j].ID
		})
		for _, i := range infos {
			if ns := i.Created.UnixNano(); afterID != "" && (ns < afterNS || ns == afterNS && i.ID <= afterID) {
				continue
			}
			s, err := h.opts.Manager.Get(c.tenant, i.ID)
			if err != nil || !matches(i.Metadata, md) {
				continue
			}
			d := h.describe(s, i)
			if tpl != "" && d.TemplateID != tpl {
				continue
			}
			if len(out) == limit {
				more = true
				break
			}
			out = append(out, d)
			last = i
		}
	}
	if more {
		w.Header().Set("X-Next-Token", pageToken(last))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// matches tells whether md holds every pair of want.
func matches(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}
