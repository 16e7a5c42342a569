package server

import (
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/session"
)

// registerCode mounts the code and context routes.
func (s *Server) registerCode() {
	s.handle("POST", "/v1/sessions/{id}/code", s.code)
	s.handle("POST", "/v1/sessions/{id}/contexts", s.createContext)
	s.handle("GET", "/v1/sessions/{id}/contexts", s.listContexts)
	s.handle("DELETE", "/v1/sessions/{id}/contexts/{ctx}", s.deleteContext)
	s.handle("POST", "/v1/sessions/{id}/contexts/{ctx}/restart", s.restartContext)
}

// codeEvent turns an interpreter event into its wire form.
func codeEvent(e interp.Event) api.CodeEvent {
	return api.CodeEvent{Type: e.Type, Text: e.Text, Data: e.Data, Name: e.Name, Value: e.Value,
		Traceback: e.Traceback, ExecutionCount: e.ExecutionCount, DurationMS: e.DurationMS, Reason: e.Reason}
}

// code runs a cell: with Accept: application/x-ndjson its events stream as
// they come, else they come back together.
func (s *Server) code(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	var req api.Code
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	timeout, err := seconds("timeout_seconds", req.TimeoutSeconds)
	if err != nil {
		return err
	}
	cr := session.CodeRequest{Code: req.Code, Language: req.Language, Context: req.Context, Timeout: timeout}
	if !wantsStream(r) {
		x, err := sess.Code(r.Context(), cr, nil)
		if err != nil {
			return err
		}
		out := api.CodeResult{Context: x.Context, ExecutionCount: x.ExecutionCount, DurationMS: float64(x.Duration) / float64(time.Millisecond),
			Interrupted: x.Interrupted, Restarted: x.Restarted, Events: []api.CodeEvent{}}
		for _, e := range x.Events {
			out.Events = append(out.Events, codeEvent(e))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	st := newStream(w)
	_, err = sess.Code(r.Context(), cr, func(e interp.Event) { st.send(codeEvent(e)) })
	if err != nil {
		st.send(api.CodeEvent{Type: api.EventError, Error: s.errorBody(w, r, err)})
	}
	return nil
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	var req api.CreateContext
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	c, err := sess.CreateContext(r.Context(), req.Language, req.Cwd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.Context{ID: c.ID, Language: c.Language, Cwd: c.Cwd})
	return nil
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	out := api.ContextList{Contexts: []api.Context{}}
	for _, c := range sess.Contexts() {
		out.Contexts = append(out.Contexts, api.Context{ID: c.ID, Language: c.Language, Cwd: c.Cwd})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	if err := sess.RemoveContext(r.Context(), r.PathValue("ctx")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	if err := sess.RestartContext(r.Context(), r.PathValue("ctx")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
