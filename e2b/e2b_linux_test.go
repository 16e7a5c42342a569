package e2b_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/e2b"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/session"
)

func TestMain(m *testing.M) {
	os.Exit(backendtest.Main(m, func() []string { return nil }))
}

// Keys of the two tenants every test server knows.
const (
	aliceKey = "alice-key-0123456789abcdef"
	bobKey   = "bob-key-0123456789abcdef00"
)

// backendCase is one backend the SDK programs run on.
type backendCase struct {
	name string
	make func(t testing.TB) sandbox.Backend
}

// backends lists the backends every program runs on: native;
// TestOtherBackends runs the commands and code programs on docker and
// gVisor too.
func backends() []backendCase {
	return []backendCase{{"native", func(t testing.TB) sandbox.Backend { return native.New(native.Options{}) }}}
}

// testServer is a real airlock server with the E2B surface on a real
// listener, over a real Manager on one backend and the python image.
type testServer struct {
	URL string
	m   *session.Manager
	// caFile is the PEM file of the server's certificate, with tls.
	caFile string
}

type serverOptions struct {
	rateLimit   float64
	rateBurst   int
	maxSessions int  // 0: 64
	tls         bool // serve HTTPS with a test certificate
	// domain serves HTTPS on port 443 of domainAddr with a certificate
	// for *.testDomain, as E2B_DOMAIN needs.
	domain bool
}

func startServer(t testing.TB, bc backendCase, so serverOptions) *testServer {
	t.Helper()
	testenv.Require(t, "root: sessions run native sandboxes as root here", testenv.Root())
	store := testimage.Store(t)
	log, err := audit.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	m, err := session.New(context.Background(), session.Options{Backends: map[string]sandbox.Backend{bc.name: bc.make(t)},
		Images: store, MaxSessions: cmp.Or(so.maxSessions, 64), Observer: audit.NewRecorder(log, audit.RecorderOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := server.ParseKeys(strings.NewReader("alice "+aliceKey+"\nbob "+bobKey+"\n"), session.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Manager: m, Keys: keys, E2B: &e2b.Options{}, RateLimit: so.rateLimit, RateBurst: so.rateBurst,
		Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	var ts *httptest.Server
	caFile := ""
	if so.domain {
		url, ca := serveDomain(t, srv)
		t.Cleanup(func() {
			srv.Shutdown()
			if err := m.Close(context.Background()); err != nil {
				t.Errorf("closing the manager: %v", err)
			}
		})
		return &testServer{URL: url, m: m, caFile: ca}
	}
	if so.tls {
		ts = httptest.NewTLSServer(srv)
		caFile = filepath.Join(t.TempDir(), "ca.pem")
		pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
		if err := os.WriteFile(caFile, pemCert, 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		ts = httptest.NewServer(srv)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("closing the manager: %v", err)
		}
	})
	return &testServer{URL: ts.URL, m: m, caFile: caFile}
}

// nodeDir is the Node project of the SDK programs.
func nodeDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json"))
	}
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter", "package.json"))
	}
	testenv.Require(t, "node and the E2B SDKs (cd e2b/testdata/node && npm ci)", err)
	return dir
}

// node runs one program of the Node project against ts with the
// configuration a user would write: the API key and both URLs.
func node(t testing.TB, ts *testServer, program string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	dir := nodeDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", program)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_KEY="+aliceKey, "E2B_API_URL="+ts.URL, "E2B_SANDBOX_URL="+ts.URL,
		"AIRLOCK_URL="+ts.URL, "ALICE_KEY="+aliceKey, "BOB_KEY="+bobKey)
	if ts.caFile != "" {
		cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+ts.caFile)
	}
	cmd.Env = append(cmd.Env, extra...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	return string(out), errb.String(), err
}

// runNode runs one SDK program and fails t for each check it reports
// failed, or when it reports none.
func runNode(t *testing.T, ts *testServer, program string, extra ...string) string {
	t.Helper()
	out, stderr, err := node(t, ts, program, extra...)
	passed, failed := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "ok - "):
			passed++
			t.Log(line)
		case strings.HasPrefix(line, "not ok - "):
			failed++
			t.Errorf("%s: %s", program, line)
		case strings.HasPrefix(line, "# "):
			t.Log(line)
		}
	}
	if err != nil {
		t.Errorf("%s: %v\nstderr:\n%s", program, err, stderr)
	}
	if passed == 0 && failed == 0 {
		t.Errorf("%s reported no checks\nstdout:\n%s\nstderr:\n%s", program, out, stderr)
	}
	t.Logf("%s: %d checks passed, %d failed", program, passed, failed)
	return out
}

// sdkProgram runs one SDK program on every backend.
func sdkProgram(t *testing.T, so serverOptions, program string) {
	forEachBackend(t, so, func(t *testing.T, ts *testServer) { runNode(t, ts, program) })
}

// forEachBackend runs f once per backend, each on a server of its own.
func forEachBackend(t *testing.T, so serverOptions, f func(t *testing.T, ts *testServer)) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			f(t, startServer(t, bc, so))
		})
	}
}

// TestControlPlane: create (templates, timeout, envs, metadata), connect,
// list with paging and filters, setTimeout, getInfo, kill, the errors the
// SDK maps (401, 404), and that a sandbox made here is a v1 session and
// the reverse.
func TestControlPlane(t *testing.T) {
	forEachBackend(t, serverOptions{}, func(t *testing.T, ts *testServer) {
		runNode(t, ts, "control.mjs")
		if n := ts.m.Count(); n != 0 {
			t.Errorf("%d sessions left after the program killed its sandboxes", n)
		}
	})
}

// TestRateLimit: a 429 with Retry-After is what the SDK retries on, and
// its RateLimitError when it may not retry.
func TestRateLimit(t *testing.T) {
	sdkProgram(t, serverOptions{rateLimit: 1, rateBurst: 2}, "ratelimit.mjs")
}

// TestCommands: commands.run in the foreground and background through
// envd's process service.
func TestCommands(t *testing.T) {
	sdkProgram(t, serverOptions{}, "commands.mjs")
}

// TestFiles: envd's filesystem service and file transfers.
func TestFiles(t *testing.T) {
	sdkProgram(t, serverOptions{}, "files.mjs")
}

// TestCodeInterpreter: runCode in Python and JavaScript with streaming;
// results, errors, execution counts; code contexts.
func TestCodeInterpreter(t *testing.T) {
	sdkProgram(t, serverOptions{}, "interp.mjs")
}

// TestSecurity: a sandbox id alone opens nothing; a token opens only its
// sandbox; a key only its tenant's.
func TestSecurity(t *testing.T) {
	sdkProgram(t, serverOptions{}, "security.mjs")
}

// TestDomain: E2B_DOMAIN alone, as a user with wildcard DNS and a
// certificate for it would set it; dns-shim.cjs stands in for the DNS.
func TestDomain(t *testing.T) {
	forEachBackend(t, serverOptions{domain: true}, func(t *testing.T, ts *testServer) {
		runNode(t, ts, "domain.mjs", "E2B_DOMAIN="+testDomain, "E2B_API_URL=", "E2B_SANDBOX_URL=",
			"AIRLOCK_TEST_DOMAIN="+testDomain, "AIRLOCK_TEST_ADDR="+domainAddr,
			"NODE_OPTIONS=--require "+filepath.Join(nodeDir(t), "dns-shim.cjs"))
	})
}

// TestHTTPS: the SDKs reach the control plane and envd over HTTPS with
// the server's own certificate, as airlock serve --tls-cert serves them.
func TestHTTPS(t *testing.T) {
	forEachBackend(t, serverOptions{tls: true}, func(t *testing.T, ts *testServer) {
		if !strings.HasPrefix(ts.URL, "https://") {
			t.Fatalf("the server is not HTTPS: %s", ts.URL)
		}
		runNode(t, ts, "https.mjs")
	})
}
