package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/testpg"
	"github.com/airlock-sandbox/airlock/sandbox"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The API keys of the tests' two tenants.
const (
	aliceKey = "alice-key-0123456789abcdef"
	bobKey   = "bob-key-0123456789abcdef01"
)

// served is an airlock serve process that a test started.
type served struct {
	url, metricsURL string
	db              string

	mu     sync.Mutex
	stderr bytes.Buffer
}

// startServe starts airlock serve (this test binary, as the CLI) on a
// free loopback port with the two tenants' keys and the audit log in db,
// waits until it listens, and stops it with SIGTERM when the test ends.
func startServe(t *testing.T, db string, args ...string) *served {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("alice "+aliceKey+"\nbob "+bobKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &served{db: db}
	argv := append([]string{"serve", "--addr", "127.0.0.1:0", "--keys-file", keys, "--audit-db", db}, args...)
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_AS_CLI=1", "AIRLOCK_HOME="+dir)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan map[string]any, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			s.mu.Lock()
			s.stderr.Write(line)
			s.stderr.WriteByte('\n')
			s.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["msg"] == "serving" {
				ready <- m
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { <-copied; done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("airlock serve ended with %v after SIGTERM\n%s", err, s.log())
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("airlock serve did not stop within a minute of SIGTERM\n%s", s.log())
		}
	})
	select {
	case m := <-ready:
		s.url = "http://" + m["addr"].(string)
		if ma, _ := m["metrics"].(string); strings.Contains(ma, ":") {
			s.metricsURL = "http://" + ma
		} else {
			s.metricsURL = s.url
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock serve did not start listening within a minute\n%s", s.log())
	}
	return s
}

func (s *served) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// call makes one API request with key (none when ""), sends body as JSON
// when it is not nil, decodes the answer into out when it is not nil, and
// returns the status.
func (s *served) call(t *testing.T, method, path, key string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// must is call that fails the test unless the status is want.
func (s *served) must(t *testing.T, want int, method, path, key string, body, out any) {
	t.Helper()
	if got := s.call(t, method, path, key, body, out); got != want {
		t.Fatalf("%s %s: status %d, want %d\n%s", method, path, got, want, s.log())
	}
}

// newSession creates a session of the key's tenant and returns its id.
func (s *served) newSession(t *testing.T, key string, pol *sandbox.Policy) string {
	t.Helper()
	var sess api.Session
	s.must(t, http.StatusCreated, "POST", "/v1/sessions", key, api.CreateSession{Policy: pol}, &sess)
	return sess.ID
}

// exec runs a shell script in a session.
func (s *served) exec(t *testing.T, key, id, script string) sandbox.Result {
	t.Helper()
	return s.execTimeout(t, key, id, script, 0)
}

// execTimeout runs a shell script in a session with a timeout of its own
// (0: the session's).
func (s *served) execTimeout(t *testing.T, key, id, script string, seconds float64) sandbox.Result {
	t.Helper()
	var res sandbox.Result
	s.must(t, http.StatusOK, "POST", "/v1/sessions/"+id+"/exec", key, api.Exec{Cmd: []string{"sh", "-c", script}, TimeoutSeconds: seconds}, &res)
	return res
}

// auditAll pages through the key's tenant's audit log, limit records at
// a time, and fails on a page that repeats or reorders records.
func (s *served) auditAll(t *testing.T, key string, limit int) []api.AuditRecord {
	t.Helper()
	var all []api.AuditRecord
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
		var page api.AuditList
		s.must(t, http.StatusOK, "GET", fmt.Sprintf("/v1/audit?after=%d&limit=%d", after, limit), key, nil, &page)
		for _, r := range page.Records {
			if r.ID <= after {
				t.Fatalf("record %d on the page after %d", r.ID, after)
			}
			after = r.ID
		}
		all = append(all, page.Records...)
		if page.Next == 0 {
			if len(page.Records) == limit {
				t.Fatalf("a full page of %d without a next cursor", limit)
			}
			return all
		}
		if page.Next != after {
			t.Fatalf("next %d, want the last id %d", page.Next, after)
		}
	}
}

// kinds counts records by kind and session.
func kinds(recs []api.AuditRecord, session string) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		if r.Session == session {
			n[r.Kind]++
		}
	}
	return n
}

// TestServeAudit: every session, exec and artifact verdict of a tenant is
// in its own GET /v1/audit, never in another's; pages of any size give
// the same records; airlock audit prints them, read-only, while the
// server runs.
func TestServeAudit(t *testing.T) {
	db := filepath.Join(t.TempDir(), "audit.db")
	s := startServe(t, db)
	alice := s.newSession(t, aliceKey, nil)
	s.exec(t, aliceKey, alice, "echo hi > /workspace/output/a.txt; echo =1+1 > /workspace/output/b.csv")
	if res := s.exec(t, aliceKey, alice, "echo oops >&2; exit 3"); res.ExitCode != 3 {
		t.Fatalf("exit 3 came back as %+v", res)
	}
	var arts api.ArtifactList
	s.must(t, http.StatusOK, "GET", "/v1/sessions/"+alice+"/artifacts", aliceKey, nil, &arts)
	s.must(t, http.StatusNoContent, "DELETE", "/v1/sessions/"+alice, aliceKey, nil, nil)
	bob := s.newSession(t, bobKey, nil)
	s.exec(t, bobKey, bob, "echo bob-was-here")
	// Another tenant's session is not found, and leaves no record of bob's.
	if code := s.call(t, "POST", "/v1/sessions/"+alice+"/exec", bobKey, api.Exec{Cmd: []string{"true"}}, nil); code != http.StatusNotFound {
		t.Errorf("bob's exec in alice's session: %d, want 404", code)
	}

	recs := s.auditAll(t, aliceKey, 100)
	for _, r := range recs {
		if r.Tenant != "alice" || r.Session == bob {
			t.Errorf("alice's audit log holds %+v", r)
		}
	}
	want := map[string]int{"session_created": 1, "exec": 2, "artifact": 2, "session_ended": 1}
	if got := kinds(recs, alice); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alice's session's records by kind: %v, want %v\n%+v", got, want, recs)
	}
	var failed, sanitized bool
	for _, r := range recs {
		failed = failed || r.Kind == "exec" && r.ExitCode == 3 && r.Bytes == 5 && strings.Contains(r.What, "exit 3")
		sanitized = sanitized || r.Kind == "artifact" && r.What == "b.csv" && strings.HasPrefix(r.Detail, "sanitized")
	}
	if !failed || !sanitized {
		t.Errorf("alice's records lack the failed exec (exit 3, 5 bytes) or b.csv's verdict: %+v", recs)
	}
	bobs := s.auditAll(t, bobKey, 100)
	for _, r := range bobs {
		if r.Tenant != "bob" || r.Session == alice {
			t.Errorf("bob's audit log holds %+v", r)
		}
	}
	if got := kinds(bobs, bob); got["session_created"] != 1 || got["exec"] != 1 || len(bobs) != 2 {
		t.Errorf("bob's records: %+v", bobs)
	}
	// Pages of any size give the same records.
	for _, limit := range []int{1, 2, 5} {
		page := s.auditAll(t, aliceKey, limit)
		if fmt.Sprint(page) != fmt.Sprint(recs) {
			t.Errorf("pages of %d: %+v\nwant %+v", limit, page, recs)
		}
	}
	if code := s.call(t, "GET", "/v1/audit", "", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/audit without a key: %d, want 401", code)
	}
	if code := s.call(t, "GET", "/v1/audit?limit=0", aliceKey, nil, nil); code != http.StatusBadRequest {
		t.Errorf("GET /v1/audit?limit=0: %d, want 400", code)
	}

	// airlock audit reads the log while the server writes it.
	out, errs, code := airlock(t, "", "audit", "--db", db)
	if code != 0 || !strings.Contains(out, alice) || !strings.Contains(out, bob) || !strings.Contains(out, "bob-was-here") ||
		!strings.Contains(out, "exit 3") || !strings.HasPrefix(out, "ID ") {
		t.Errorf("airlock audit: exit %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = airlock(t, "", "audit", "--db", db, "--tenant", "bob", "--since", "1h")
	if code != 0 || strings.Contains(out, alice) || !strings.Contains(out, "bob-was-here") {
		t.Errorf("airlock audit --tenant bob: exit %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = airlock(t, "", "audit", "--db", db, "--json", "--limit", "2")
	var list api.AuditList
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Records) != 2 || list.Records[1].Session != bob {
		t.Errorf("airlock audit --json --limit 2: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	_, errs, code = airlock(t, "", "audit", "--db", filepath.Join(t.TempDir(), "none.db"))
	if code != sandbox.ExitFailed || !strings.Contains(errs, "no audit log at") {
		t.Errorf("airlock audit of no log: exit %d, %q", code, errs)
	}
}

// TestAuditTableEscapes: what a tenant's code chose (a command, a file
// name) can neither break a row nor reach the terminal as control bytes.
func TestAuditTableEscapes(t *testing.T) {
	db := filepath.Join(t.TempDir(), "audit.db")
	s, err := audit.OpenSQLite(context.Background(), db, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	forged := "ls\n99  2030-01-01T00:00:00Z  bob  exec  x  rm -rf /  exit 0\x1b]0;pwned\a\u202e\t\u009b"
	if err := s.Append(context.Background(), api.AuditRecord{Tenant: "alice", Kind: "exec", What: forged, Detail: "a\\nb"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	out, errs, code := airlock(t, "", "audit", "--db", db)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("airlock audit: exit %d, %d lines\n%s\n%s", code, len(lines), out, errs)
	}
	for _, bad := range []string{"\x1b", "\a", "\u202e", "\t", "\u009b"} {
		if strings.Contains(out, bad) {
			t.Errorf("the table holds %q raw:\n%s", bad, out)
		}
	}
	if !strings.Contains(lines[1], `ls\n99`) || !strings.Contains(lines[1], `\x1b]0;pwned\a\u202e\t\u009b`) || !strings.Contains(lines[1], `a\\nb`) {
		t.Errorf("the row does not show the escapes:\n%s", lines[1])
	}
}

// scrape reads the server's metrics, parsed from the text format.
func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parsing the metrics: %v\n%s", err, b)
	}
	return fams, string(b)
}

// metric is the value of the series of family name whose labels include
// labels ("k=v" each): a counter's or gauge's value, a histogram's count;
// 0 when there is no such series.
func metric(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			ok = ok && have[k] == v
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// TestServeMetrics: /metrics moves with what the sessions do: the
// sessions gauge, the warm pool, create and run latencies, timeouts,
// OOM kills, pids-limit hits, egress allowed and denied, verdicts, and
// requests by route pattern; and it names no tenant, session or host.
func TestServeMetrics(t *testing.T) {
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "from the host\n") }))
	defer host.Close()
	_, port, _ := net.SplitHostPort(host.Listener.Addr().String())
	portN, _ := strconv.Atoi(port)
	s := startServe(t, filepath.Join(t.TempDir(), "audit.db"), "--pool", "native:host=1")
	fams, _ := scrape(t, s.url)
	for deadline := time.Now().Add(time.Minute); metric(fams, "airlock_pool_ready") < 1; fams, _ = scrape(t, s.url) {
		if time.Now().After(deadline) {
			t.Fatal("the warm pool did not fill within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := fams
	if metric(before, "airlock_sessions_active") != 0 || metric(before, "airlock_pool_hits_total") != 0 {
		t.Fatalf("before any session: active %g, pool hits %g", metric(before, "airlock_sessions_active"), metric(before, "airlock_pool_hits_total"))
	}

	pooled := s.newSession(t, aliceKey, nil) // the default policy: the pool's
	pol := &sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 32, Timeout: sandbox.Duration(time.Minute)},
		Network: sandbox.NetworkPolicy{Allow: []sandbox.EgressRule{{Host: "allowed.example"}, {CIDR: "127.0.0.1/32", Ports: []int{portN}}}}}
	limited := s.newSession(t, bobKey, pol)
	mid, _ := scrape(t, s.url)
	if got := metric(mid, "airlock_sessions_active"); got != 2 {
		t.Errorf("sessions active with two: %g", got)
	}
	s.exec(t, aliceKey, pooled, "echo x > /workspace/output/ok.txt; ln -s /etc/passwd /workspace/output/link.txt")
	var arts api.ArtifactList
	s.must(t, http.StatusOK, "GET", "/v1/sessions/"+pooled+"/artifacts", aliceKey, nil, &arts)
	if res := s.execTimeout(t, bobKey, limited, "sleep 10", 1); !res.TimedOut {
		t.Errorf("sleep 10 with a 1s timeout: %+v", res)
	}
	// Execs: the pooled session's, the timeout and the egress below; sessions: pooled, limited.
	execs, sessions := 3, 2
	reported := func(what, script string, hit func(sandbox.Result) bool) float64 {
		t.Helper()
		id := s.newSession(t, bobKey, pol)
		res := s.exec(t, bobKey, id, script)
		s.must(t, http.StatusNoContent, "DELETE", "/v1/sessions/"+id, bobKey, nil, nil)
		execs, sessions = execs+1, sessions+1
		if !hit(res) {
			t.Errorf("%s: not reported: %+v", what, res)
			return 0
		}
		return 1
	}
	ooms := reported("512 MiB under a 64 MiB cap", `python3 -c 'b = b"x" * (512 << 20); print(len(b))'`,
		func(r sandbox.Result) bool { return r.OOMKilled })
	pidsHits := reported("64 sleeps under a cap of 32 pids", "for i in $(seq 64); do sleep 0.5 & done; wait",
		func(r sandbox.Result) bool { return r.PidsLimitHit })
	script := fmt.Sprintf(`python3 - <<'EOF'
import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%d/", timeout=20).read().decode(), end="")
try:
    urllib.request.urlopen("http://denied.example/", timeout=20)
except Exception as e:
    print("denied:", e)
EOF`, portN)
	if res := s.exec(t, bobKey, limited, script); !strings.Contains(res.Stdout, "from the host") || len(res.Egress) != 2 {
		t.Errorf("egress through the proxy: %+v", res)
	}
	if code := s.call(t, "GET", "/v1/sessions/0123456789abcdef0123456789abcdef", aliceKey, nil, nil); code != http.StatusNotFound {
		t.Errorf("an unknown session: %d", code)
	}
	s.must(t, http.StatusNoContent, "DELETE", "/v1/sessions/"+pooled, aliceKey, nil, nil)
	s.must(t, http.StatusNoContent, "DELETE", "/v1/sessions/"+limited, bobKey, nil, nil)

	after, text := scrape(t, s.url)
	moved := func(name string, want float64, labels ...string) {
		t.Helper()
		if d := metric(after, name, labels...) - metric(before, name, labels...); d != want {
			t.Errorf("%s%v moved by %g, want %g", name, labels, d, want)
		}
	}
	moved("airlock_sessions_created_total", float64(sessions), "backend=native")
	moved("airlock_sessions_ended_total", float64(sessions), "backend=native")
	moved("airlock_session_create_seconds", 1, "backend=native", "pooled=true")
	moved("airlock_session_create_seconds", float64(sessions-1), "backend=native", "pooled=false")
	moved("airlock_pool_hits_total", 1, "backend=native")
	moved("airlock_runs_total", float64(execs), "kind=exec", "backend=native")
	moved("airlock_run_seconds", float64(execs), "kind=exec", "backend=native")
	moved("airlock_timeouts_total", 1, "kind=exec")
	moved("airlock_oom_kills_total", ooms, "kind=exec")
	moved("airlock_pids_limit_hits_total", pidsHits, "kind=exec")
	moved("airlock_egress_decisions_total", 1, "decision=allowed")
	moved("airlock_egress_decisions_total", 1, "decision=denied")
	moved("airlock_artifact_verdicts_total", 1, "verdict=accepted")
	moved("airlock_artifact_verdicts_total", 1, "verdict=rejected")
	moved("airlock_http_requests_total", float64(execs), "route=POST /v1/sessions/{id}/exec", "status=200")
	moved("airlock_http_requests_total", 1, "route=GET /v1/sessions/{id}", "status=404")
	moved("airlock_http_requests_total", float64(sessions), "route=POST /v1/sessions", "status=201")
	moved("airlock_audit_errors_total", 0)
	if got := metric(after, "airlock_sessions_active"); got != 0 {
		t.Errorf("sessions active after both ended: %g", got)
	}
	for _, secret := range []string{"alice", "bob", pooled, limited, "denied.example", "allowed.example", "127.0.0.1:" + port, aliceKey} {
		if strings.Contains(text, secret) {
			t.Errorf("/metrics shows %q", secret)
		}
	}
}

// TestServeMetricsAddr: --metrics-addr moves /metrics to a listener of
// its own, off the API's.
func TestServeMetricsAddr(t *testing.T) {
	s := startServe(t, "none", "--metrics-addr", "127.0.0.1:0")
	if s.metricsURL == s.url {
		t.Fatalf("no metrics listener of its own:\n%s", s.log())
	}
	if fams, _ := scrape(t, s.metricsURL); fams["airlock_sessions_active"] == nil {
		t.Error("the metrics listener lacks airlock_sessions_active")
	}
	if code := s.call(t, "GET", "/metrics", "", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET /metrics on the API's listener: %d, want 404", code)
	}
	// --audit-db none keeps no log.
	if code := s.call(t, "GET", "/v1/audit", aliceKey, nil, nil); code != http.StatusNotImplemented {
		t.Errorf("GET /v1/audit without a log: %d, want 501", code)
	}
}

// TestServeAuditRetention: records older than --audit-retention are
// pruned (a backdated record goes as the server starts), newer ones stay.
func TestServeAuditRetention(t *testing.T) {
	db := filepath.Join(t.TempDir(), "audit.db")
	st, err := audit.OpenSQLite(context.Background(), db, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := st.Append(context.Background(),
		api.AuditRecord{Time: now.Add(-48 * time.Hour), Tenant: "alice", Kind: "exec", What: "two days ago"},
		api.AuditRecord{Time: now.Add(-time.Hour), Tenant: "alice", Kind: "exec", What: "an hour ago"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	s := startServe(t, db, "--audit-retention", "24h")
	deadline := time.Now().Add(time.Minute)
	for {
		recs := s.auditAll(t, aliceKey, 10)
		var whats []string
		for _, r := range recs {
			whats = append(whats, r.What)
		}
		logged := strings.Contains(s.log(), `"msg":"pruned the audit log","records":1`)
		if strings.Join(whats, ",") == "an hour ago" && logged {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the start, alice's records are %q (want only the one of an hour ago), the pruning logged: %v\n%s", whats, logged, s.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeAuditPostgres: two servers, replicas, share one PostgreSQL
// audit log: each one's GET /v1/audit holds the records of calls made to
// the other, in one order; airlock audit reads the database; and neither
// server's log nor a refused start shows the database's password.
func TestServeAuditPostgres(t *testing.T) {
	srv := testpg.Start(t)
	db := srv.NewDatabase(t)
	a := startServe(t, db)
	b := startServe(t, db)
	sa := a.newSession(t, aliceKey, nil)
	a.exec(t, aliceKey, sa, "echo on-a")
	sb := b.newSession(t, aliceKey, nil)
	b.exec(t, aliceKey, sb, "echo on-b")
	bob := b.newSession(t, bobKey, nil)
	b.exec(t, bobKey, bob, "echo bob-was-here")

	fromA, fromB := a.auditAll(t, aliceKey, 2), b.auditAll(t, aliceKey, 3)
	if fmt.Sprint(fromA) != fmt.Sprint(fromB) {
		t.Errorf("the replicas' logs differ:\n%+v\n%+v", fromA, fromB)
	}
	var onA, onB bool
	for _, r := range fromA {
		if r.Tenant != "alice" {
			t.Errorf("alice's audit log holds %+v", r)
		}
		onA = onA || r.Session == sa && strings.Contains(r.What, "echo on-a")
		onB = onB || r.Session == sb && strings.Contains(r.What, "echo on-b")
	}
	if !onA || !onB {
		t.Errorf("alice's records lack the exec on replica a (%v) or on b (%v): %+v", onA, onB, fromA)
	}
	out, errs, code := airlock(t, "", "audit", "--db", db, "--tenant", "alice")
	if code != 0 || !strings.Contains(out, "echo on-a") || !strings.Contains(out, "echo on-b") {
		t.Errorf("airlock audit --db URL: exit %d\n%s\n%s", code, out, errs)
	}

	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{srv.Password(), url.UserPassword("", srv.Password()).String()[1:]}
	wrong := *u
	wrong.User = url.UserPassword(testpg.User, "Wr0ng-S3cret")
	_, errs, code = airlock(t, "", "serve", "--addr", "127.0.0.1:0", "--audit-db", wrong.String())
	if code == 0 || !strings.Contains(errs, "password authentication failed") || strings.Contains(errs, "Wr0ng-S3cret") {
		t.Errorf("airlock serve with a wrong database password: exit %d, stderr %q; want a failure naming the cause, not the password", code, errs)
	}
	for _, s := range []*served{a, b} {
		log := s.log()
		if !strings.Contains(log, `"audit_db":"postgres://airlock:xxxxx@`) {
			t.Errorf("the serving line does not show the masked URL:\n%s", log)
		}
		for _, x := range secrets {
			if strings.Contains(log, x) {
				t.Errorf("airlock serve's log shows the database password %q:\n%s", x, log)
			}
		}
	}
}
