package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/metrics"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads the metrics as Prometheus would, parsed from the text
// format.
func scrape(t *testing.T, h http.Handler) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	text := rec.Body.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the metrics: %v", err)
	}
	return fams, text
}

// value is the counter's value, or the histogram's count, of the series
// of family name whose labels include labels ("k=v" each).
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
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
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return 0
}

func TestEvents(t *testing.T) {
	m := metrics.New()
	ev := func(e session.Event) { m.Event(e) }
	ev(session.Event{Kind: session.EventCreated, Backend: "native", Owner: "alice-secret-tenant", DurationMS: 40})
	ev(session.Event{Kind: session.EventCreated, Backend: "native", Pooled: true, DurationMS: 2})
	ev(session.Event{Kind: session.EventPoolHit, Backend: "native"})
	ev(session.Event{Kind: session.EventPoolMiss, Backend: "native"})
	ev(session.Event{Kind: session.EventExec, Backend: "native", What: "curl secret.example", TimedOut: true, DurationMS: 3000})
	ev(session.Event{Kind: session.EventExec, Backend: "native", OOMKilled: true, PidsLimitHit: true, Error: "x"})
	ev(session.Event{Kind: session.EventCode, Backend: "native"})
	ev(session.Event{Kind: session.EventEgress, Egress: &sandbox.EgressEvent{Host: "secret.example", Allowed: true}})
	ev(session.Event{Kind: session.EventEgress, Egress: &sandbox.EgressEvent{Host: "10.0.0.1"}})
	ev(session.Event{Kind: session.EventEgress, Egress: &sandbox.EgressEvent{Host: "10.0.0.2"}})
	for _, v := range []string{"accepted", "sanitized", "rejected", "rejected", "weird"} {
		ev(session.Event{Kind: session.EventArtifact, Artifact: &sandbox.Artifact{Path: "secret.csv", Verdict: v}})
	}
	ev(session.Event{Kind: session.EventEnded, Backend: "native"})
	ev(session.Event{Kind: session.EventEnded, Backend: "Evil Backend {x}"})
	m.AuditError(nil)
	fams, text := scrape(t, m.Handler())
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_sessions_created_total", []string{"backend=native"}, 2},
		{"airlock_session_create_seconds", []string{"pooled=true"}, 1},
		{"airlock_session_create_seconds", []string{"pooled=false"}, 1},
		{"airlock_pool_hits_total", nil, 1},
		{"airlock_pool_misses_total", nil, 1},
		{"airlock_runs_total", []string{"kind=exec"}, 2},
		{"airlock_runs_total", []string{"kind=code"}, 1},
		{"airlock_run_seconds", []string{"kind=exec"}, 2},
		{"airlock_run_errors_total", []string{"kind=exec"}, 1},
		{"airlock_timeouts_total", []string{"kind=exec"}, 1},
		{"airlock_oom_kills_total", []string{"kind=exec"}, 1},
		{"airlock_pids_limit_hits_total", []string{"kind=exec"}, 1},
		{"airlock_egress_decisions_total", []string{"decision=allowed"}, 1},
		{"airlock_egress_decisions_total", []string{"decision=denied"}, 2},
		{"airlock_artifact_verdicts_total", []string{"verdict=rejected"}, 2},
		{"airlock_artifact_verdicts_total", []string{"verdict=other"}, 1},
		{"airlock_sessions_ended_total", []string{"backend=other"}, 1},
		{"airlock_audit_errors_total", nil, 1},
	} {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
	for _, secret := range []string{"alice", "secret", "10.0.0", "Evil"} {
		if strings.Contains(text, secret) {
			t.Errorf("the metrics show %q", secret)
		}
	}
	if fams["go_goroutines"] == nil || fams["process_open_fds"] == nil {
		t.Error("the Go runtime's and the process's metrics are missing")
	}
}

func TestInstrument(t *testing.T) {
	m := metrics.New()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "missing" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("POST /v1/sessions/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		_ = http.NewResponseController(w).Flush()
	})
	h := m.Instrument(mux)
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 3 {
		do("GET", fmt.Sprintf("/v1/sessions/0123456789abcdef%d", i))
	}
	do("GET", "/v1/sessions/missing")
	do("POST", "/v1/sessions/abc/exec")
	do("GET", "/no/such/path-with-a-secret")
	fams, text := scrape(t, m.Handler())
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"route=GET /v1/sessions/{id}", "status=200"}, 3},
		{[]string{"route=GET /v1/sessions/{id}", "status=404"}, 1},
		{[]string{"route=POST /v1/sessions/{id}/exec", "status=200"}, 1},
		{[]string{"route=unmatched", "status=404"}, 1},
	} {
		if got := value(fams, "airlock_http_requests_total", c.labels...); got != c.want {
			t.Errorf("requests %v = %g, want %g", c.labels, got, c.want)
		}
	}
	if got := value(fams, "airlock_http_request_seconds", "route=GET /v1/sessions/{id}"); got != 4 {
		t.Errorf("timed requests of GET /v1/sessions/{id}: %g, want 4", got)
	}
	for _, s := range []string{"0123456789abcdef", "secret", "abc/exec"} {
		if strings.Contains(text, s) {
			t.Errorf("a path made a label: %q in the metrics", s)
		}
	}
}
