package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	"golang.org/x/sys/unix"
)

// register mounts every route with what the OpenAPI document says of it:
// its body and answers (the api types), statuses and parameters.
func (s *Server) register() {
	sessionErrs := []int{404, 410}
	bodyErrs := []int{400, 408, 413}
	s.handle("POST", "/v1/sessions", s.createSession, routeDoc{ID: "createSession", Tag: "sessions",
		Summary: "Create a session: a sandbox that lives across calls until it is deleted or its TTL or idle timeout passes",
		Request: api.CreateSession{}, Status: 201, Response: api.Session{}, Errors: join(bodyErrs, []int{501})})
	s.handle("GET", "/v1/sessions", s.listSessions, routeDoc{ID: "listSessions", Tag: "sessions",
		Summary: "List the tenant's sessions, oldest first", Status: 200, Response: api.SessionList{}})
	s.handle("GET", "/v1/sessions/{id}", s.getSession, routeDoc{ID: "getSession", Tag: "sessions",
		Summary: "Describe a session", Status: 200, Response: api.Session{}, Errors: sessionErrs})
	s.handle("DELETE", "/v1/sessions/{id}", s.deleteSession, routeDoc{ID: "deleteSession", Tag: "sessions",
		Summary: "End a session and destroy its sandbox", Status: 204, Errors: sessionErrs})
	s.handle("POST", "/v1/sessions/{id}/ttl", s.setTTL, routeDoc{ID: "setSessionTTL", Tag: "sessions",
		Summary: "Make a session end ttl_seconds from now", Request: api.SetTTL{}, Status: 200, Response: api.Session{},
		Errors: join(sessionErrs, bodyErrs)})
	s.handle("PUT", "/v1/sessions/{id}/files/{path...}", s.putFile, routeDoc{ID: "putFile", Tag: "files",
		Summary: "Write a file; one under input/ is read-only to the code", RawRequest: "the file's bytes",
		Status: 201, Response: sandbox.FileInfo{}, Errors: join(sessionErrs, bodyErrs)})
	s.handle("GET", "/v1/sessions/{id}/files/{path...}", s.getFile, routeDoc{ID: "getFile", Tag: "files",
		Summary: "Download a file through the artifact filter (its verdict in X-Airlock-Verdict and X-Airlock-Reason; a rejected file is a 403), or list a folder",
		Status:  200, RawResponse: "the file's bytes as the artifact filter lets them out", Response: api.FileList{},
		Errors: join(sessionErrs, []int{400, 403})})
	s.handle("DELETE", "/v1/sessions/{id}/files/{path...}", s.deleteFile, routeDoc{ID: "deleteFile", Tag: "files",
		Summary: "Remove a file, or a folder and everything in it", Status: 204, Errors: join(sessionErrs, []int{400})})
	s.handle("GET", "/v1/sessions/{id}/artifacts", s.listArtifacts, routeDoc{ID: "listArtifacts", Tag: "files",
		Summary: "Judge every file of /workspace/output with the artifact filter", Status: 200, Response: api.ArtifactList{},
		Errors: join(sessionErrs, []int{501})})
	s.handle("POST", "/v1/sessions/{id}/exec", s.exec, routeDoc{ID: "exec", Tag: "processes",
		Summary: "Run a command to its end and answer its Result, or stream its output (Accept: application/x-ndjson), or start it in the background (background: true, 202)",
		Request: api.Exec{}, Status: 200, Response: sandbox.Result{}, Stream: api.ExecEvent{},
		Also:   []answer{{Status: 202, Type: api.Process{}, Description: "the background process started"}},
		Errors: join(sessionErrs, bodyErrs)})
	s.handle("GET", "/v1/sessions/{id}/processes", s.listProcesses, routeDoc{ID: "listProcesses", Tag: "processes",
		Summary: "List the session's background processes, oldest first", Status: 200, Response: api.ProcessList{}, Errors: sessionErrs})
	s.handle("GET", "/v1/sessions/{id}/processes/{pid}", s.getProcess, routeDoc{ID: "getProcess", Tag: "processes",
		Summary: "Describe a background process; with wait, wait up to that long for its end", Status: 200, Response: api.Process{},
		Query:  []param{{Name: "wait", Type: "number", Description: "seconds to wait for the process to end, 0 to 604800"}},
		Errors: join(sessionErrs, []int{400})})
	s.handle("POST", "/v1/sessions/{id}/processes/{pid}/signal", s.signalProcess, routeDoc{ID: "signalProcess", Tag: "processes",
		Summary: "Send a signal to a background process", Request: api.Signal{}, Status: 204, Errors: join(sessionErrs, bodyErrs)})
	s.handle("POST", "/v1/sessions/{id}/processes/{pid}/stdin", s.processStdin, routeDoc{ID: "writeStdin", Tag: "processes",
		Summary: "Write the body to a background process's stdin; with eof=1 close it after", RawRequest: "the bytes for stdin",
		Status: 204, Query: []param{{Name: "eof", Type: "string", Description: "1 closes stdin after the body"}},
		Errors: join(sessionErrs, []int{408, 409, 413})})
	s.registerCode(sessionErrs, bodyErrs)
	s.handle("GET", "/v1/audit", s.audit, routeDoc{ID: "listAudit", Tag: "audit",
		Summary: "Read a page of the tenant's own audit records, oldest first", Status: 200, Response: api.AuditList{},
		Query: []param{{Name: "after", Type: "integer", Description: "the id of the last record seen (the previous page's next)"},
			{Name: "limit", Type: "integer", Description: "page size, 1 to 1000 (default 100)"}},
		Errors: []int{400, 501}})
	s.public("GET", "/openapi.json", s.serveOpenAPI, routeDoc{ID: "openapi", Tag: "server",
		Summary: "This document: OpenAPI 3.1 of every route", Status: 200, Response: map[string]any{}})
	s.public("GET", "/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}, routeDoc{ID: "healthz", Tag: "server", Summary: "Whether the server answers", Status: 200, Response: map[string]string{}})
	s.public("GET", "/readyz", s.readyz, routeDoc{ID: "readyz", Tag: "server",
		Summary: "Whether the server takes sessions (503 while it shuts down)", Status: 200, Response: map[string]string{},
		Errors: []int{503}})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})
}

// join concatenates status lists.
func join(lists ...[]int) []int {
	var out []int
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.closing.Load() {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the server is shutting down")
		return
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// session finds the request's session of tenant t: one this process
// holds, or one another airlock process created on a backend that shares
// its sandboxes (a cluster served by several replicas).
func (s *Server) session(r *http.Request, t *Tenant) (*session.Session, error) {
	return s.opts.Manager.Find(r.Context(), t.Name, r.PathValue("id"))
}

func sessionInfo(i session.Info) api.Session {
	return api.Session{ID: i.ID, Backend: i.Backend, Image: i.Image, Created: i.Created, ExpiresAt: i.ExpiresAt,
		LastUsed: i.LastUsed, IdleTimeoutSeconds: i.IdleTimeout.Seconds(), Metadata: i.Metadata, Limits: i.Limits, Pooled: i.Pooled}
}

// maxMetadata bounds a session's metadata.
const maxMetadata = 64

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	var req api.CreateSession
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	ttl, err := seconds("ttl_seconds", req.TTLSeconds)
	if err != nil {
		return err
	}
	idle, err := seconds("idle_timeout_seconds", req.IdleTimeoutSeconds)
	if err != nil {
		return err
	}
	if len(req.Metadata) > maxMetadata {
		return errorf(http.StatusBadRequest, api.CodeInvalid, "metadata: more than %d entries", maxMetadata)
	}
	for k, v := range req.Metadata {
		if len(k) > 256 || len(v) > 4096 {
			return errorf(http.StatusBadRequest, api.CodeInvalid, "metadata %.40q: keys up to 256 bytes, values up to 4096", k)
		}
	}
	var pol sandbox.Policy
	if req.Policy != nil {
		pol = *req.Policy
	}
	sess, err := s.opts.Manager.Create(r.Context(), session.CreateOptions{Owner: t.Name, Backend: req.Backend, Image: req.Image,
		Policy: pol, TTL: ttl, IdleTimeout: idle, Metadata: req.Metadata})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sessionInfo(sess.Info()))
	return nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	out := api.SessionList{Sessions: []api.Session{}}
	for _, i := range s.opts.Manager.List(t.Name) {
		out.Sessions = append(out.Sessions, sessionInfo(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sessionInfo(sess.Info()))
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	if err := s.opts.Manager.Destroy(r.Context(), t.Name, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sessionRequest finds the request's session and reads its JSON body.
func sessionRequest[T any](s *Server, w http.ResponseWriter, r *http.Request, t *Tenant) (*session.Session, T, error) {
	var req T
	sess, err := s.session(r, t)
	if err != nil {
		return nil, req, err
	}
	return sess, req, s.readJSON(w, r, &req)
}

func (s *Server) setTTL(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, req, err := sessionRequest[api.SetTTL](s, w, r, t)
	if err != nil {
		return err
	}
	ttl, err := seconds("ttl_seconds", req.TTLSeconds)
	if err != nil {
		return err
	}
	if err := sess.SetTTL(ttl); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sessionInfo(sess.Info()))
	return nil
}

// filePath turns the {path} of a files route, relative to /workspace,
// into the sandbox's path. "tmp/…" reaches /tmp.
func filePath(r *http.Request) (string, error) {
	rel := r.PathValue("path")
	if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", errorf(http.StatusBadRequest, api.CodeInvalid, "file path %q: want a clean path relative to /workspace (input/…, output/…) or tmp/…", rel)
	}
	if t, ok := strings.CutPrefix(rel, "tmp"); ok && (t == "" || t[0] == '/') {
		return "/" + rel, nil
	}
	return "/workspace/" + rel, nil
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.UploadTimeout))
	info, err := sess.Put(r.Context(), p, r.Body, 0)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		return errorf(http.StatusRequestTimeout, api.CodeTimeout, "the file did not arrive within %v", s.opts.UploadTimeout)
	}
	if errors.Is(err, sandbox.ErrLimit) {
		// waiting would not make the file fit: not a 429
		return errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "%s", cleanMessage(err, sandbox.ErrLimit))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// getFile answers a folder with its listing and a file with its content
// as the artifact filter passes it: an accepted or sanitized file's
// (possibly rewritten) bytes with the verdict in headers, a rejected
// file's verdict as a 403.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	info, err := sess.Files().Stat(r.Context(), p)
	if err != nil {
		return err
	}
	if info.IsDir() {
		list, err := sess.Files().List(r.Context(), p)
		if err != nil {
			return err
		}
		if list == nil {
			list = []sandbox.FileInfo{}
		}
		writeJSON(w, http.StatusOK, api.FileList{Files: list})
		return nil
	}
	spool, err := os.CreateTemp("", "airlock-download-*")
	if err != nil {
		return err
	}
	os.Remove(spool.Name())
	defer spool.Close()
	a, err := sess.Download(r.Context(), p, spool)
	if err != nil {
		return err
	}
	if a.Verdict == sandbox.VerdictRejected {
		w.Header().Set(api.HeaderVerdict, a.Verdict)
		w.Header().Set(api.HeaderReason, headerSafe(a.Reason))
		return errorf(http.StatusForbidden, api.CodeForbidden, "the artifact filter rejected %s: %s", p, a.Reason)
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set(api.HeaderVerdict, a.Verdict)
	if a.Reason != "" {
		h.Set(api.HeaderReason, headerSafe(a.Reason))
	}
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	for _, line := range strings.Split(a.ServeHint, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			h.Set(k, v)
		}
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.NewSectionReader(spool, 0, size))
	return nil
}

// headerSafe keeps a header value to printable ASCII.
func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	if err := sess.Files().Remove(r.Context(), p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	arts, err := sess.Artifacts(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ArtifactList{Artifacts: arts})
	return nil
}

// wantsStream tells whether the client asked for NDJSON.
func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), api.ContentNDJSON)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, req, err := sessionRequest[api.Exec](s, w, r, t)
	if err != nil {
		return err
	}
	timeout, err := seconds("timeout_seconds", req.TimeoutSeconds)
	if err != nil {
		return err
	}
	spec := sandbox.ProcessSpec{Cmd: req.Cmd, Env: req.Env, Dir: req.Dir, Timeout: sandbox.Duration(timeout)}
	if req.Background {
		if req.Stdin != "" {
			return errorf(http.StatusBadRequest, api.CodeInvalid, "a background process takes its stdin from POST .../processes/{pid}/stdin")
		}
		spec.OpenStdin = true
		p, err := sess.Start(r.Context(), spec)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, processInfo(p))
		return nil
	}
	if req.Stdin != "" {
		spec.Stdin = strings.NewReader(req.Stdin)
	}
	if !wantsStream(r) {
		res, err := sess.Exec(r.Context(), spec)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	st := newStream(w)
	spec.Stdout, spec.Stderr = st.writer(api.EventStdout), st.writer(api.EventStderr)
	res, err := sess.Exec(r.Context(), spec)
	if err != nil {
		st.send(api.ExecEvent{Type: api.EventError, Error: s.errorBody(w, r, err)})
		return nil
	}
	st.send(api.ExecEvent{Type: api.EventResult, Result: &res})
	return nil
}

// errorBody is the API error an error maps to, for a stream that already
// answered 200.
func (s *Server) errorBody(w http.ResponseWriter, r *http.Request, err error) *api.Error {
	rec := &bodyRecorder{header: http.Header{}}
	rec.header.Set(api.HeaderRequestID, w.Header().Get(api.HeaderRequestID))
	s.fail(rec, r, err)
	var e api.Error
	if json.Unmarshal(rec.body, &e) != nil {
		return &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	return &e
}

// bodyRecorder captures what fail writes.
type bodyRecorder struct {
	header http.Header
	body   []byte
}

func (b *bodyRecorder) Header() http.Header { return b.header }
func (b *bodyRecorder) WriteHeader(int)     {}
func (b *bodyRecorder) Write(p []byte) (int, error) {
	b.body = append(b.body, p...)
	return len(p), nil
}

// stream writes NDJSON events as they come, one line each, flushed.
type stream struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

// streamWriteTimeout bounds how long one event may take to reach a slow
// client before the stream is cut.
const streamWriteTimeout = time.Minute

func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", api.ContentNDJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	st := &stream{w: w, rc: http.NewResponseController(w)}
	_ = st.rc.Flush()
	return st
}

// send writes one event.
func (st *stream) send(ev any) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	_ = st.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := st.w.Write(append(b, '\n')); err == nil {
		_ = st.rc.Flush()
	}
}

// writer streams what is written as events of one type.
func (st *stream) writer(typ string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		st.send(api.ExecEvent{Type: typ, Data: string(p)})
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func processInfo(p *session.Process) api.Process {
	out := api.Process{ID: p.ID, Cmd: p.Cmd, Started: p.Started, Running: p.Running()}
	if !out.Running {
		if res, err := p.Wait(context.Background()); err == nil {
			out.Result = &res
		}
	}
	return out
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	sess, err := s.session(r, t)
	if err != nil {
		return err
	}
	out := api.ProcessList{Processes: []api.Process{}}
	for _, p := range sess.Processes() {
		out.Processes = append(out.Processes, processInfo(p))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getProcess describes a background process; with ?wait=SECONDS it waits
// up to that long for it to end.
func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	p, err := s.process(r, t)
	if err != nil {
		return err
	}
	if v := r.URL.Query().Get("wait"); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errorf(http.StatusBadRequest, api.CodeInvalid, "wait %q: want seconds", v)
		}
		d, err := seconds("wait", secs)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(r.Context(), d)
		_, _ = p.Wait(ctx)
		cancel()
	}
	writeJSON(w, http.StatusOK, processInfo(p))
	return nil
}

func (s *Server) process(r *http.Request, t *Tenant) (*session.Process, error) {
	sess, err := s.session(r, t)
	if err != nil {
		return nil, err
	}
	return sess.Process(r.PathValue("pid"))
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	p, err := s.process(r, t)
	if err != nil {
		return err
	}
	var req api.Signal
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		return err
	}
	if err := p.Signal(r.Context(), sig); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseSignal reads "SIGINT", "INT" or "2".
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, errorf(http.StatusBadRequest, api.CodeInvalid, "signal %q: want a name such as SIGINT or a number", s)
}

// processStdin writes the body to a background process's stdin; with
// ?eof=1 it closes it after.
func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	p, err := s.process(r, t)
	if err != nil {
		return err
	}
	in := p.Stdin()
	if in == nil {
		return errorf(http.StatusConflict, api.CodeConflict, "process %s has no open stdin", p.ID)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.UploadTimeout))
	if _, err := io.Copy(in, http.MaxBytesReader(w, r.Body, 64<<20)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return errorf(http.StatusRequestTimeout, api.CodeTimeout, "the body did not arrive within %v", s.opts.UploadTimeout)
		}
		return errorf(http.StatusConflict, api.CodeConflict, "process %s: stdin: %v", p.ID, err)
	}
	if r.URL.Query().Get("eof") == "1" {
		_ = in.Close()
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// audit answers a page of the tenant's own audit records.
func (s *Server) audit(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	if s.opts.Audit == nil {
		return errorf(http.StatusNotImplemented, api.CodeUnsupported, "this server keeps no audit log")
	}
	q := r.URL.Query()
	after, limit := int64(0), 100
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return errorf(http.StatusBadRequest, api.CodeInvalid, "after %q: want a record id", v)
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return errorf(http.StatusBadRequest, api.CodeInvalid, "limit %q: want 1 to 1000", v)
		}
		limit = n
	}
	recs, err := s.opts.Audit.Query(r.Context(), t.Name, after, limit)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	out := api.AuditList{Records: recs}
	if out.Records == nil {
		out.Records = []api.AuditRecord{}
	}
	if len(recs) == limit {
		out.Next = recs[len(recs)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
