package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
)

func TestMain(m *testing.M) {
	os.Exit(backendtest.Main(m, func() []string { return nil }))
}

// testKey is the key of tenant alice in the servers these tests start.
const testKey = "alice-key-0123456789abcdef"

// testServer is a Server over a Manager of native sandboxes, served on
// loopback.
type testServer struct {
	srv *server.Server
	hs  *httptest.Server
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	testenv.Require(t, "root: the server's sessions run native sandboxes as root here", testenv.Root())
	m, err := session.New(context.Background(), session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := server.ParseKeys(strings.NewReader("alice "+testKey+"\n"), session.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Manager: m, Keys: keys, RateLimit: 1e6, RateBurst: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("closing the manager: %v", err)
		}
	})
	return &testServer{srv: srv, hs: hs}
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// call sends one request with tenant alice's key (or none, key "").
func (ts *testServer) call(t *testing.T, method, path, key, contentType string, body io.Reader, accept string) answer {
	t.Helper()
	req, err := http.NewRequest(method, ts.hs.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := ts.hs.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// json sends v as a JSON body.
func (ts *testServer) json(t *testing.T, method, path string, v any) answer {
	t.Helper()
	var body io.Reader
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		body = strings.NewReader(string(b))
	}
	return ts.call(t, method, path, testKey, "application/json", body, "")
}

// newSession creates a session and returns its id.
func (ts *testServer) newSession(t *testing.T) string {
	t.Helper()
	a := ts.json(t, "POST", "/v1/sessions", map[string]any{})
	if a.status != 201 {
		t.Fatalf("create session: %d %s", a.status, a.body)
	}
	var s struct{ ID string }
	if err := json.Unmarshal(a.body, &s); err != nil || s.ID == "" {
		t.Fatalf("create session: %s (%v)", a.body, err)
	}
	return s.ID
}
