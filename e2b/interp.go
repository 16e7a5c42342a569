package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// jupyterRoutes mounts the code interpreter: /execute and /contexts, over
// the session's interpreter contexts (Session.Code and the rest).
func (h *Handler) jupyterRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute", h.execute)
	mux.HandleFunc("POST /contexts", h.createContext)
	mux.HandleFunc("GET /contexts", h.listContexts)
	mux.HandleFunc("DELETE /contexts/{ctx}", h.removeContext)
	mux.HandleFunc("POST /contexts/{ctx}/restart", h.restartContext)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "the code interpreter has no route "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// codeContext is a context as the SDKs describe it.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// e2bLanguage names a language as the SDKs do.
func e2bLanguage(l string) string {
	if l == interp.JavaScript {
		return "javascript"
	}
	return l
}

func contextOf(c session.ContextInfo) codeContext {
	return codeContext{ID: c.ID, Language: e2bLanguage(c.Language), Cwd: c.Cwd}
}

// defaults holds, per sandbox, the default context of each language that
// runCode uses when it names none: made on first use with HOME as its
// working folder, as E2B's start in the user's home.
type defaults struct {
	mu        sync.Mutex
	bySandbox map[string]*sandboxDefaults
}

type sandboxDefaults struct {
	owner string
	ids   map[string]string // language -> context id
}

// defaultContext finds or makes s's default context of lang.
func (h *Handler) defaultContext(ctx context.Context, s *session.Session, lang string) (string, error) {
	h.defs.mu.Lock()
	defer h.defs.mu.Unlock()
	if h.defs.bySandbox == nil {
		h.defs.bySandbox = map[string]*sandboxDefaults{}
	}
	d := h.defs.bySandbox[s.ID()]
	if d == nil {
		d = &sandboxDefaults{owner: s.Owner(), ids: map[string]string{}}
		h.defs.bySandbox[s.ID()] = d
	}
	m := d.ids
	key := strings.ToLower(lang)
	switch key {
	case "", "python", "python3", "py":
		key = "python"
	case "js", "node", "javascript":
		key = "javascript"
	}
	if id, ok := m[key]; ok {
		for _, c := range s.Contexts() {
			if c.ID == id {
				return id, nil
			}
		}
	}
	c, err := s.CreateContext(ctx, lang, Home)
	if err != nil {
		return "", err
	}
	m[key] = c.ID
	return c.ID, nil
}

// forgetDefaults drops the default contexts of sandboxes that are gone.
func (h *Handler) forgetDefaults(gone func(id, owner string) bool) {
	h.defs.mu.Lock()
	defer h.defs.mu.Unlock()
	for id, d := range h.defs.bySandbox {
		if gone(id, d.owner) {
			delete(h.defs.bySandbox, id)
		}
	}
}

// jupyterFail writes an error of the code interpreter's routes: the SDK
// reads a 404's body as a NotFoundError's message, other statuses by
// their status line.
func (h *Handler) jupyterFail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	status, msg := statusOf(err)
	if status == http.StatusInternalServerError {
		h.log.Error("e2b code interpreter request failed", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}

type executeRequest struct {
	Code      string            `json:"code"`
	Language  string            `json:"language"`
	ContextID string            `json:"context_id"`
	EnvVars   map[string]string `json:"env_vars"`
}

// maxCode bounds a cell, with its JSON.
const maxCode = 16 << 20

// execute runs a cell and streams its output as NDJSON lines. The call
// has no timeout of its own beyond the sandbox's life: the SDK's timeoutMs
// is kept by the client, which goes away at it; the cell is then
// interrupted.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	s, err := current(r.Context())
	if err != nil {
		h.jupyterFail(w, r, err)
		return
	}
	var req executeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCode)).Decode(&req); err != nil {
		h.jupyterFail(w, r, httpError(http.StatusBadRequest, "the body is not valid JSON for /execute: "+err.Error()))
		return
	}
	if req.ContextID != "" && req.Language != "" {
		h.jupyterFail(w, r, httpError(http.StatusBadRequest, "give a context or a language, not both"))
		return
	}
	id := req.ContextID
	lang := ""
	if id == "" {
		if id, err = h.defaultContext(r.Context(), s, req.Language); err != nil {
			h.jupyterFail(w, r, err)
			return
		}
	}
	for _, c := range s.Contexts() {
		if c.ID == id {
			lang = c.Language
		}
	}
	if lang == "" {
		h.jupyterFail(w, r, httpError(http.StatusNotFound, fmt.Sprintf("context %s not found", id)))
		return
	}
	restore := ""
	if len(req.EnvVars) > 0 {
		set, undo, err := envCode(lang, req.EnvVars)
		if err != nil {
			h.jupyterFail(w, r, err)
			return
		}
		if _, err := s.Code(r.Context(), session.CodeRequest{Code: set, Context: id, Timeout: envCallTimeout}, nil); err != nil {
			h.jupyterFail(w, r, err)
			return
		}
		restore = undo
	}
	out := newNDJSON(w)
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				out.keepalive()
			}
		}
	}()
	_, err = s.Code(r.Context(), session.CodeRequest{Code: req.Code, Context: id, Timeout: commandTimeout(r.Context(), s)}, func(ev interp.Event) {
		for _, l := range lines(ev, time.Now()) {
			out.send(l)
		}
	})
	close(stop)
	if restore != "" {
		_, _ = s.Code(context.WithoutCancel(r.Context()), session.CodeRequest{Code: restore, Context: id, Timeout: envCallTimeout}, nil)
	}
	if err != nil && r.Context().Err() == nil {
		_, msg := statusOf(err)
		out.send(map[string]any{"type": lineError, "name": "ContextError", "value": msg, "traceback": ""})
	}
	out.send(map[string]any{"type": lineEnd})
}

// envCallTimeout bounds the short calls that set and restore a cell's
// environment variables.
const envCallTimeout = 30 * time.Second

// envCode is the code that sets a cell's environment variables in a
// context of lang, and the code that puts the old values back after the
// cell: the SDKs' envs of runCode hold for that one call. Both run as
// calls of their own, so the cell's code, and its line numbers, are the
// caller's.
func envCode(lang string, env map[string]string) (set, undo string, err error) {
	for k, v := range env {
		if err := sandbox.CheckEnv(k, v); err != nil {
			return "", "", err
		}
	}
	b, _ := json.Marshal(env)
	switch lang {
	case interp.Python:
		set = "import os as _e2b_os, json as _e2b_json\n_e2b_env = _e2b_json.loads(" + pyString(string(b)) + ")\n" +
			"_e2b_saved = {k: _e2b_os.environ.get(k) for k in _e2b_env}\n_e2b_os.environ.update(_e2b_env)\nNone"
		undo = "for _k, _v in _e2b_saved.items():\n    _e2b_os.environ.pop(_k, None) if _v is None else _e2b_os.environ.__setitem__(_k, _v)\nNone"
	case interp.JavaScript:
		set = "globalThis.__e2bSaved = {}; for (const [k, v] of Object.entries(" + string(b) + ")) { __e2bSaved[k] = process.env[k]; process.env[k] = v }; undefined"
		undo = "for (const [k, v] of Object.entries(globalThis.__e2bSaved || {})) { if (v === undefined) delete process.env[k]; else process.env[k] = v }; undefined"
	default:
		return "", "", httpError(http.StatusBadRequest, fmt.Sprintf("envs of one call are offered for python and javascript contexts, not %s", lang))
	}
	return set, undo, nil
}

// pyString quotes s as a Python string literal (JSON's escapes are
// Python's too, for what json.Marshal writes).
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

type createContextRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request) {
	s, err := current(r.Context())
	if err != nil {
		h.jupyterFail(w, r, err)
		return
	}
	var req createContextRequest
	if err := readBody(w, r, &req); err != nil {
		h.jupyterFail(w, r, err)
		return
	}
	cwd := Home
	if req.Cwd != "" {
		cwd = resolve(req.Cwd)
	}
	c, err := s.CreateContext(r.Context(), req.Language, cwd)
	if err != nil {
		h.jupyterFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, contextOf(c))
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request) {
	s, err := current(r.Context())
	if err != nil {
		h.jupyterFail(w, r, err)
		return
	}
	out := []codeContext{}
	for _, c := range s.Contexts() {
		out = append(out, contextOf(c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) removeContext(w http.ResponseWriter, r *http.Request) {
	h.onContext(w, r, (*session.Session).RemoveContext)
}

func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request) {
	h.onContext(w, r, (*session.Session).RestartContext)
}

// onContext applies op to the context of the path and answers 204.
func (h *Handler) onContext(w http.ResponseWriter, r *http.Request, op func(*session.Session, context.Context, string) error) {
	s, err := current(r.Context())
	if err == nil {
		err = op(s, r.Context(), r.PathValue("ctx"))
	}
	if err != nil {
		h.jupyterFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
