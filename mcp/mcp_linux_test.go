package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/internal/testsession"
	"github.com/airlock-sandbox/airlock/mcp"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/airlock-sandbox/airlock/tools"
)

// serveStdioEnv makes the test binary an MCP server on its stdin and
// stdout, for the TypeScript client to start.
const serveStdioEnv = "AIRLOCK_MCP_TEST_STDIO"

func TestMain(m *testing.M) {
	if os.Getenv(serveStdioEnv) == "1" {
		os.Exit(serveStdio())
	}
	os.Exit(backendtest.Main(m, func() []string { return nil }))
}

// serveStdio is the child's side: a Manager and a Server on stdio, until
// the client goes.
func serveStdio() int {
	store, err := testimage.Find()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp test server:", err)
		return 1
	}
	m, err := session.New(context.Background(), session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})}, Images: store})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp test server:", err)
		return 1
	}
	defer m.Close(context.Background())
	s, err := newServer(m, store.Dir())
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp test server:", err)
		return 1
	}
	if err := s.ServeStdio(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mcp test server:", err)
		return 1
	}
	if n := len(m.List(mcp.Owner)); n != 0 {
		fmt.Fprintf(os.Stderr, "mcp test server: %d sessions alive after the client went\n", n)
		return 1
	}
	return 0
}

// newServer is the server the tests use: python sessions with a short
// timeout.
func newServer(m *session.Manager, _ string) (*mcp.Server, error) {
	store, err := testimage.Find()
	if err != nil {
		return nil, err
	}
	img, err := store.Get(testimage.Name)
	if err != nil {
		return nil, err
	}
	return mcp.New(mcp.Options{Manager: m,
		Session: session.CreateOptions{Image: testimage.Name, IdleTimeout: time.Minute,
			Policy: sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(20 * time.Second)}}},
		Env: tools.Env{Image: testimage.Name, About: img.Manifest.Definition.Description, Vision: true}})
}

const aliceKey, bobKey = "alice-key-0123456789abcdef", "bob-key-0123456789abcdefgh"

func httpServer(t *testing.T, idle time.Duration) (*httptest.Server, *session.Manager) {
	t.Helper()
	m := testsession.Manager(t, func(o *session.Options) { o.ReapEvery = 100 * time.Millisecond })
	s, err := newServer(m, "")
	if err != nil {
		t.Fatal(err)
	}
	if idle > 0 {
		s, err = mcp.New(mcp.Options{Manager: m, Session: session.CreateOptions{Image: testimage.Name, IdleTimeout: idle},
			Env: tools.Env{Image: testimage.Name}})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	keys, err := server.ParseKeys(strings.NewReader("alice "+aliceKey+"\nbob "+bobKey+"\n"), session.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler(keys))
	t.Cleanup(hs.Close)
	return hs, m
}

// bearer adds an API key to every request.
type bearer struct {
	key string
	rt  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.rt.RoundTrip(r)
}

func connect(t *testing.T, url, key string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func createSession(t *testing.T, cs *sdk.ClientSession) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: mcp.CreateSession, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("create_session: %v %+v", err, res)
	}
	id, _ := res.StructuredContent.(map[string]any)["session_id"].(string)
	if id == "" {
		t.Fatalf("create_session gave no session_id: %+v", res.StructuredContent)
	}
	return id
}

// TestHTTPKeysAndTenants: without a key or with a wrong one the server
// answers 401; a tenant cannot reach another's session, by tool or by
// resource.
func TestHTTPKeysAndTenants(t *testing.T) {
	hs, _ := httpServer(t, 0)
	for _, auth := range []string{"", "Bearer wrong-key-0123456789abcdef"} {
		req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("authorization %q: status %d, want 401", auth, resp.StatusCode)
		}
	}
	alice, bob := connect(t, hs.URL, aliceKey), connect(t, hs.URL, bobKey)
	id := createSession(t, alice)
	if out, isErr := callText(t, alice, tools.RunCommand, map[string]any{"session_id": id, "command": "echo secret > output/a.txt; echo ok"}); isErr || !strings.Contains(out, "ok") {
		t.Fatalf("alice's command: %s", out)
	}
	if out, isErr := callText(t, bob, tools.ReadFile, map[string]any{"session_id": id, "path": "output/a.txt"}); !isErr || strings.Contains(out, "secret") || !strings.Contains(out, "there is no session") {
		t.Errorf("bob read alice's file: %s", out)
	}
	if _, err := bob.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcp.ArtifactScheme + id + "/artifacts/a.txt"}); err == nil {
		t.Error("bob read alice's artifact resource")
	}
	res, err := alice.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcp.ArtifactScheme + id + "/artifacts/a.txt"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "secret\n" {
		t.Errorf("alice's own resource: %+v, %v", res, err)
	}
	if out, isErr := callText(t, alice, tools.RunCommand, map[string]any{"command": "true"}); !isErr || !strings.Contains(out, "session_id is missing") {
		t.Errorf("a call without a session: %s", out)
	}
}

// TestHTTPIdleTimeout: over HTTP a session ends at its idle timeout, and
// a call on it then says so.
func TestHTTPIdleTimeout(t *testing.T) {
	hs, m := httpServer(t, 2*time.Second)
	cs := connect(t, hs.URL, aliceKey)
	id := createSession(t, cs)
	deadline := time.Now().Add(20 * time.Second)
	for len(m.List("alice")) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(m.List("alice")); n != 0 {
		t.Fatalf("%d sessions alive past their idle timeout", n)
	}
	if out, isErr := callText(t, cs, tools.ListFiles, map[string]any{"session_id": id}); !isErr || !strings.Contains(out, "has ended") {
		t.Errorf("a call on an ended session: %s", out)
	}
}

// TestStdioClientGone: when a stdio client goes away, even without
// closing its session, the server destroys the sessions it made.
func TestStdioClientGone(t *testing.T) {
	m := testsession.Manager(t, nil)
	s, err := newServer(m, "")
	if err != nil {
		t.Fatal(err)
	}
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(context.Background(), sr, sw) }()
	c := sdk.NewClient(&sdk.Implementation{Name: "go-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	createSession(t, cs)
	createSession(t, cs)
	if n := len(m.List(mcp.Owner)); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	cw.Close() // the client is gone: the server reads end of file
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("ServeStdio: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeStdio did not return after its client went")
	}
	cr.Close()
	if n := len(m.List(mcp.Owner)); n != 0 {
		t.Errorf("%d sessions alive after the client went", n)
	}
}
