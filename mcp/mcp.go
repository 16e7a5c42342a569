// Package mcp is airlock's MCP server: the sandbox's tools (package
// tools) and its sessions offered to any MCP client, over stdio or
// streamable HTTP, with the official Go SDK. Tools create a session, run
// code and commands in it, write and read its files, list and fetch its
// artifacts and destroy it; images come back as image content, and
// artifacts are resources (airlock://sessions/ID/artifacts/PATH) that
// pass the artifact filter when read. Over stdio the sessions a client
// made die when it goes away; over HTTP they end at their idle timeout,
// and each API key's tenant sees only its own.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/airlock-sandbox/airlock/tools"
)

// Tool names besides the sandbox's own (package tools).
const (
	CreateSession  = "create_session"
	DestroySession = "destroy_session"
	FetchArtifact  = "fetch_artifact"
)

// ArtifactScheme starts the URIs of artifact resources:
// airlock://sessions/ID/artifacts/PATH.
const ArtifactScheme = "airlock://sessions/"

// MaxFetch bounds an artifact handed out in one MCP message.
const MaxFetch = 16 << 20

// Options configure a Server.
type Options struct {
	// Manager runs the sessions.
	Manager *session.Manager
	// Session is what create_session creates: backend, image, policy,
	// TTL and idle timeout. Owner is set per client.
	Session session.CreateOptions
	// Env describes the sandbox to the model; its Limits are the
	// session policy's, normalized.
	Env tools.Env
	// Tools bound the tools' arguments and observations.
	Tools tools.Options
	// Version is the server's version, for the handshake.
	Version string
	// Logger receives what the server does; nil discards it.
	Logger *slog.Logger
}

// Server is one MCP server over a Manager.
type Server struct {
	o   Options
	log *slog.Logger
	srv *sdk.Server

	mu      sync.Mutex
	entries map[string]*entry // by session id
}

// entry is a session the server made: its kit, and a lock that keeps its
// calls in order.
type entry struct {
	mu    sync.Mutex
	kit   *tools.Kit
	owner string
}

// New returns a Server with its tools and resources.
func New(o Options) (*Server, error) {
	if o.Manager == nil {
		return nil, fmt.Errorf("mcp: no session manager: %w", sandbox.ErrInvalid)
	}
	pol, err := o.Session.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	o.Session.Policy = pol
	o.Env.Limits = pol.Limits
	if o.Version == "" {
		o.Version = "devel"
	}
	s := &Server{o: o, log: o.Logger, entries: map[string]*entry{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "airlock", Title: "airlock sandbox", Version: o.Version},
		&sdk.ServerOptions{Instructions: "Run code in an isolated sandbox. Call " + CreateSession + " first; pass its session_id to the other tools. " + o.Env.Describe(),
			Logger: s.log})
	s.addTools()
	s.srv.AddResourceTemplate(&sdk.ResourceTemplate{Name: "artifact", URITemplate: ArtifactScheme + "{session_id}/artifacts/{+path}",
		Description: "A file of a session's /workspace/output, as the artifact filter hands it out (rejected files cannot be read)."},
		s.readArtifact)
	return s, nil
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// addTools registers the tools.
func (s *Server) addTools() {
	idle := s.o.Session.IdleTimeout
	life := "Sessions end when this client disconnects (stdio) or after they are idle"
	if idle > 0 {
		life += fmt.Sprintf(" for %v", idle)
	}
	s.srv.AddTool(&sdk.Tool{Name: CreateSession, Title: "Create a sandbox session",
		Description: "Create a sandbox session and get its session_id, which the other tools take. Files and interpreter state persist " +
			"across calls in one session. " + life + ". " + s.o.Env.Describe(),
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{}},
		Annotations: &sdk.ToolAnnotations{OpenWorldHint: no(), DestructiveHint: no()}}, s.createSession)
	s.srv.AddTool(&sdk.Tool{Name: DestroySession, Title: "Destroy a sandbox session",
		Description: "Destroy a session and everything in it; its artifacts can no longer be read.",
		InputSchema: withSession(map[string]any{"type": "object", "properties": map[string]any{}}),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}}, s.destroySession)
	for _, spec := range tools.Specs(s.o.Env) {
		readOnly := spec.Name == tools.ReadFile || spec.Name == tools.ListFiles || spec.Name == tools.ListArtifacts
		s.srv.AddTool(&sdk.Tool{Name: spec.Name, Description: spec.Description, InputSchema: withSession(spec.Parameters),
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: no(), OpenWorldHint: no()}}, s.sandboxTool(spec.Name))
	}
	s.srv.AddTool(&sdk.Tool{Name: FetchArtifact, Title: "Fetch an artifact",
		Description: "Fetch a file of /workspace/output as the user would get it: through the artifact filter (a rejected file is refused with the reason). " +
			"Images come back as images, text as text, other files as an embedded resource, up to 16 MB. The same file is the resource " +
			ArtifactScheme + "SESSION/artifacts/PATH.",
		InputSchema: withSession(map[string]any{"type": "object", "required": []string{"path"},
			"properties": map[string]any{"path": map[string]any{"type": "string", "description": "the path below /workspace/output, e.g. report.pptx"}}}),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no()}}, s.fetchArtifact)
}

// withSession adds the session_id argument to a tool's schema.
func withSession(schema map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range schema {
		out[k] = v
	}
	props := map[string]any{"session_id": map[string]any{"type": "string", "description": "the session, from " + CreateSession}}
	if p, ok := schema["properties"].(map[string]any); ok {
		for k, v := range p {
			props[k] = v
		}
	}
	out["properties"] = props
	req := []string{"session_id"}
	if r, ok := schema["required"].([]string); ok {
		req = append(req, r...)
	}
	out["required"] = req
	return out
}

// Owner names the tenant of calls without an API key: stdio, and HTTP on
// loopback without keys.
const Owner = "default"

// owner is the tenant a call comes from.
func owner(extra *sdk.RequestExtra) string {
	if extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return extra.TokenInfo.UserID
	}
	return Owner
}

func textResult(isErr bool, format string, a ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, a...)}}, IsError: isErr}
}

func (s *Server) createSession(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	o := s.o.Session
	o.Owner = owner(req.Extra)
	sess, err := s.o.Manager.Create(ctx, o)
	if err != nil {
		return textResult(true, "error: the session could not be created: %v", err), nil
	}
	s.mu.Lock()
	s.entries[sess.ID()] = &entry{kit: tools.NewKit(tools.Local(sess), s.o.Env, s.o.Tools), owner: o.Owner}
	s.mu.Unlock()
	s.log.Info("session created", "session", sess.ID(), "owner", o.Owner)
	res := textResult(false, "session_id: %s\n%s", sess.ID(), s.o.Env.Describe())
	res.StructuredContent = map[string]any{"session_id": sess.ID()}
	return res, nil
}

// session finds the caller's session named in a call's arguments.
func (s *Server) session(req *sdk.CallToolRequest) (*session.Session, *entry, json.RawMessage, *sdk.CallToolResult) {
	args := req.Params.Arguments
	var a struct {
		SessionID string `json:"session_id"`
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, nil, nil, textResult(true, "error: the arguments are not a JSON object: %v", err)
		}
	}
	if a.SessionID == "" {
		return nil, nil, nil, textResult(true, "error: session_id is missing; call %s first", CreateSession)
	}
	own := owner(req.Extra)
	sess, err := s.o.Manager.Get(own, a.SessionID)
	if err != nil {
		s.forget(a.SessionID)
		if errors.Is(err, session.ErrEnded) {
			return nil, nil, nil, textResult(true, "error: session %s has ended (%v); create another with %s", a.SessionID, err, CreateSession)
		}
		return nil, nil, nil, textResult(true, "error: there is no session %s; create one with %s", a.SessionID, CreateSession)
	}
	s.mu.Lock()
	e := s.entries[a.SessionID]
	if e == nil || e.owner != own {
		e = &entry{kit: tools.NewKit(tools.Local(sess), s.o.Env, s.o.Tools), owner: own}
		s.entries[a.SessionID] = e
	}
	s.mu.Unlock()
	return sess, e, args, nil
}

func (s *Server) forget(id string) {
	s.mu.Lock()
	delete(s.entries, id)
	s.mu.Unlock()
}

func (s *Server) destroySession(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	sess, e, _, bad := s.session(req)
	if bad != nil {
		return bad, nil
	}
	s.forget(sess.ID())
	if err := e.kit.Sandbox().Destroy(ctx); err != nil {
		return textResult(true, "error: destroying session %s: %v", sess.ID(), err), nil
	}
	return textResult(false, "session %s destroyed", sess.ID()), nil
}

// sandboxTool serves one of the sandbox's tools on the session a call
// names.
func (s *Server) sandboxTool(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		sess, e, args, bad := s.session(req)
		if bad != nil {
			return bad, nil
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		obs, err := e.kit.Call(ctx, name, string(args))
		if err != nil {
			return nil, err
		}
		res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: obs.Text}}, IsError: obs.IsError}
		for _, img := range obs.Images {
			res.Content = append(res.Content, &sdk.ImageContent{Data: img.Data, MIMEType: img.MIME})
		}
		if name == tools.ListArtifacts && !obs.IsError {
			arts, err := sess.Artifacts(ctx)
			if err == nil {
				for _, a := range arts {
					if a.Verdict == sandbox.VerdictRejected {
						continue
					}
					size := a.Size
					res.Content = append(res.Content, &sdk.ResourceLink{URI: artifactURI(sess.ID(), a.Path), Name: a.Path,
						MIMEType: a.MIME, Size: &size, Description: a.Verdict})
				}
			}
		}
		return res, nil
	}
}

// artifactURI names an artifact as a resource.
func artifactURI(id, p string) string { return ArtifactScheme + id + "/artifacts/" + p }

// fetched is an artifact as the filter hands it out.
type fetched struct {
	a    sandbox.Artifact
	data []byte
	mime string
}

// fetch runs one file of /workspace/output through the artifact filter.
func (s *Server) fetch(ctx context.Context, sess *session.Session, rel string) (fetched, error) {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	if rel == "" || rel == "." {
		return fetched{}, fmt.Errorf("name a file below %s: %w", tools.OutputDir, sandbox.ErrInvalid)
	}
	info, err := sess.Files().Stat(ctx, tools.OutputDir+"/"+rel)
	if errors.Is(err, sandbox.ErrInvalid) {
		return fetched{}, fmt.Errorf("the artifact filter rejected %s: %w", rel, err)
	}
	if err != nil {
		return fetched{}, err
	}
	if info.Size > MaxFetch {
		return fetched{}, fmt.Errorf("%s is %s, over the %s one MCP message carries: %w", rel, tools.Bytes(info.Size), tools.Bytes(MaxFetch), sandbox.ErrLimit)
	}
	spool, err := os.CreateTemp("", "airlock-mcp-*")
	if err != nil {
		return fetched{}, err
	}
	os.Remove(spool.Name())
	defer spool.Close()
	a, err := sess.Download(ctx, tools.OutputDir+"/"+rel, spool)
	if errors.Is(err, sandbox.ErrInvalid) {
		return fetched{}, fmt.Errorf("the artifact filter rejected %s: %w", rel, err)
	}
	if err != nil {
		return fetched{}, err
	}
	if a.Verdict == sandbox.VerdictRejected {
		return fetched{a: a}, fmt.Errorf("the artifact filter rejected %s: %s: %w", rel, a.Reason, sandbox.ErrInvalid)
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err != nil {
		return fetched{}, err
	}
	if size > MaxFetch {
		return fetched{}, fmt.Errorf("%s is over the %s one MCP message carries: %w", rel, tools.Bytes(MaxFetch), sandbox.ErrLimit)
	}
	data := make([]byte, size)
	if _, err := spool.ReadAt(data, 0); err != nil && err != io.EOF {
		return fetched{}, err
	}
	m := a.MIME
	if m == "" {
		m = mime.TypeByExtension(path.Ext(rel))
	}
	if m == "" {
		m = "application/octet-stream"
	}
	return fetched{a: a, data: data, mime: m}, nil
}

// isText tells whether a MIME type is sent as text.
func isText(m string) bool {
	base, _, _ := strings.Cut(m, ";")
	return strings.HasPrefix(base, "text/") || base == "application/json" || base == "image/svg+xml" || strings.HasSuffix(base, "+json")
}

func (s *Server) fetchArtifact(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	sess, _, args, bad := s.session(req)
	if bad != nil {
		return bad, nil
	}
	var a struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(args, &a)
	f, err := s.fetch(ctx, sess, a.Path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, sandbox.ErrNotFound) {
			return textResult(true, "error: there is no %s in %s", a.Path, tools.OutputDir), nil
		}
		return textResult(true, "error: %v", err), nil
	}
	uri := artifactURI(sess.ID(), f.a.Path)
	note := fmt.Sprintf("%s: %s, %s, %s", f.a.Path, f.mime, tools.Bytes(int64(len(f.data))), f.a.Verdict)
	if f.a.Reason != "" && f.a.Verdict != sandbox.VerdictAccepted {
		note += ": " + f.a.Reason
	}
	res := textResult(false, "%s", note)
	switch {
	case f.mime == "image/png" || f.mime == "image/jpeg" || f.mime == "image/gif" || f.mime == "image/webp":
		res.Content = append(res.Content, &sdk.ImageContent{Data: f.data, MIMEType: f.mime})
	case isText(f.mime):
		res.Content = append(res.Content, &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: f.mime, Text: string(f.data)}})
	default:
		res.Content = append(res.Content, &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: f.mime, Blob: f.data}})
	}
	return res, nil
}

// readArtifact serves an artifact resource.
func (s *Server) readArtifact(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, ArtifactScheme)
	id, rel, ok2 := strings.Cut(rest, "/artifacts/")
	if !ok || !ok2 || id == "" || rel == "" {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	sess, err := s.o.Manager.Get(owner(req.Extra), id)
	if err != nil {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	f, err := s.fetch(ctx, sess, rel)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	rc := &sdk.ResourceContents{URI: uri, MIMEType: f.mime}
	if isText(f.mime) {
		rc.Text = string(f.data)
	} else {
		rc.Blob = f.data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{rc}}, nil
}

// destroyAll ends every session the server made.
func (s *Server) destroyAll(ctx context.Context) {
	s.mu.Lock()
	entries := s.entries
	s.entries = map[string]*entry{}
	s.mu.Unlock()
	for id, e := range entries {
		if _, err := s.o.Manager.Get(e.owner, id); err == nil {
			_ = e.kit.Sandbox().Destroy(ctx)
			s.log.Info("session destroyed: its client went away", "session", id)
		}
	}
}

// ServeStdio serves one client on r and w (stdin and stdout) until it
// goes away or ctx ends, then destroys the sessions it made.
func (s *Server) ServeStdio(ctx context.Context, r io.ReadCloser, w io.WriteCloser) error {
	defer s.destroyAll(context.WithoutCancel(ctx))
	err := s.srv.Run(ctx, &sdk.IOTransport{Reader: r, Writer: w})
	if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

// Handler serves MCP over streamable HTTP. With keys, every request needs
// "Authorization: Bearer KEY"; the key's tenant owns the sessions its
// calls make, and a client's MCP session cannot be used with another
// tenant's key. Without keys every caller is tenant "default" (serve on
// loopback only: server.CheckListen).
func (s *Server) Handler(keys *server.Keys) http.Handler {
	// An MCP session outlives the sandbox sessions it made, so that a
	// client that comes back after their idle timeout hears that they
	// ended, rather than that its own session is unknown.
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv },
		&sdk.StreamableHTTPOptions{Logger: s.log, SessionTimeout: max(2*s.o.Session.IdleTimeout, 10*time.Minute)})
	if keys.Len() == 0 {
		return h
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		t, ok := keys.Lookup(token)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: t.Name, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	return auth.RequireBearerToken(verify, nil)(h)
}

// Close ends every MCP session (an HTTP client's lives on after the
// client has gone, until its timeout) and destroys every sandbox session
// the server made.
func (s *Server) Close(ctx context.Context) {
	var open []*sdk.ServerSession
	for ss := range s.srv.Sessions() {
		open = append(open, ss)
	}
	for _, ss := range open {
		_ = ss.Close()
	}
	s.destroyAll(ctx)
}
