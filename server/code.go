package server

import (
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/session"
)

// registerCode mounts the code and context routes, with the error
// statuses every session route and every route with a body may give.
func (s *Server) registerCode(sessionErrs, bodyErrs []int) {
	s.handle("POST", "/v1/sessions/{id}/code", s.code, routeDoc{ID: "runCode", Tag: "code",
		Summary: "Run code in an interpreter context (the language's default one without context) and answer its events, or stream them (Accept: application/x-ndjson)",
		Request: api.Code{}, Status: 200, Response: api.CodeResult{}, Stream: api.CodeEvent{}, Errors: join(sessionErrs, bodyErrs)})
	s.handle("POST", "/v1/sessions/{id}/contexts", s.createContext, routeDoc{ID: "createContext", Tag: "code",
		Summary: "Start an interpreter context (python, javascript or bash)", Request: api.CreateContext{},
		Status: 201, Response: api.Context{}, Errors: join(sessionErrs, bodyErrs)})
	s.handle("GET", "/v1/sessions/{id}/contexts", s.listContexts, routeDoc{ID: "listContexts", Tag: "code",
		Summary: "List the session's interpreter contexts", Status: 200, Response: api.ContextList{}, Errors: sessionErrs})
	s.handle("DELETE", "/v1/sessions/{id}/contexts/{context}", s.deleteContext, routeDoc{ID: "deleteContext", Tag: "code",
		Summary: "End an interpreter context and what it held", Status: 204, Errors: sessionErrs})
	s.handle("POST", "/v1/sessions/{id}/contexts/{context}/restart", s.restartContext, routeDoc{ID: "restartContext", Tag: "code",
		Summary: "Restart an interpreter context: its state is gone", Status: 204, Errors: sessionErrs})
}

// codeEvent turns an interpreter event into its wire form.
func codeEvent(e interp.Event) api.CodeEvent {
	return api.CodeEvent{Type: e.Type, Text: e.Text, Data: e.Data, Name: e.Name, Value: e.Value,
		Traceback: e.Traceback, ExecutionCount: e.ExecutionCount, DurationMS: e.DurationMS, Reason: e.Reason}
}

// code runs a cell: with Accept: application/x-ndjson its events stream as
// they come, else they come back together.
func (s *Server) code(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, req, err := sessionRequest[api.Code](s, w, r, t)
	if err != nil {
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
	sess, req, err := sessionRequest[api.CreateContext](s, w, r, t)
	if err != nil {
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
	if err := sess.RemoveContext(r.Context(), r.PathValue("context")); err != nil {
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
	if err := sess.RestartContext(r.Context(), r.PathValue("context")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
