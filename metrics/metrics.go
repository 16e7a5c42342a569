// Package metrics keeps airlock serve's Prometheus metrics: sessions,
// warm pools, processes and code calls, the limits they hit, egress
// decisions, artifact verdicts, the audit log's failures and the HTTP
// requests, by route and status. A Metrics is a session.Observer; Handler
// serves the text format.
//
// No metric has a label that a request chooses freely: backends are the
// ones the server serves, routes are the API's patterns (never a path),
// verdicts and decisions are fixed sets. No tenant, session, command or
// host name appears, so /metrics tells nothing of one tenant to anyone.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the metrics of one airlock serve, in a registry of their
// own (never the global one).
type Metrics struct {
	reg *prometheus.Registry

	created, ended       *prometheus.CounterVec   // backend
	createSeconds        *prometheus.HistogramVec // backend, pooled
	poolHits, poolMisses *prometheus.CounterVec   // backend
	runs                 *prometheus.CounterVec   // kind, backend
	runSeconds           *prometheus.HistogramVec // kind, backend
	runErrors            *prometheus.CounterVec   // kind
	timeouts, ooms, pids *prometheus.CounterVec   // kind
	egress               *prometheus.CounterVec   // decision
	artifacts            *prometheus.CounterVec   // verdict
	auditErrors          prometheus.Counter
	requests             *prometheus.CounterVec   // route, status
	requestSeconds       *prometheus.HistogramVec // route
}

var _ session.Observer = (*Metrics)(nil)

// Buckets of the latency histograms, in seconds.
var (
	createBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	runBuckets    = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// New returns the metrics, with the Go runtime's and the process's own.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "airlock", Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "airlock", Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.created = counter("sessions_created_total", "Sessions created.", "backend")
	m.ended = counter("sessions_ended_total", "Sessions ended (destroyed, expired, idle, died, shut down).", "backend")
	m.createSeconds = histogram("session_create_seconds", "How long creating a session took.", createBuckets, "backend", "pooled")
	m.poolHits = counter("pool_hits_total", "Sessions served from a warm pool.", "backend")
	m.poolMisses = counter("pool_misses_total", "Sessions that a matching warm pool had no sandbox ready for.", "backend")
	m.runs = counter("runs_total", "Processes (kind exec) and code calls (kind code) that ended.", "kind", "backend")
	m.runSeconds = histogram("run_seconds", "How long a process or code call ran.", runBuckets, "kind", "backend")
	m.runErrors = counter("run_errors_total", "Processes and code calls that failed in airlock or the sandbox, not in the code.", "kind")
	m.timeouts = counter("timeouts_total", "Processes and code calls stopped at their timeout.", "kind")
	m.ooms = counter("oom_kills_total", "Processes and code calls killed at their memory cap.", "kind")
	m.pids = counter("pids_limit_hits_total", "Processes and code calls that hit the pids cap (a fork failed).", "kind")
	m.egress = counter("egress_decisions_total", "Egress proxy decisions, allowed or denied.", "decision")
	m.artifacts = counter("artifact_verdicts_total", "Artifact filter verdicts.", "verdict")
	m.auditErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "airlock", Name: "audit_errors_total",
		Help: "Audit records that could not be stored."})
	m.reg.MustRegister(m.auditErrors)
	m.requests = counter("http_requests_total", "HTTP requests, by route pattern and status.", "route", "status")
	m.requestSeconds = histogram("http_request_seconds", "How long HTTP requests took, by route pattern.", prometheus.DefBuckets, "route")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchManager adds the gauges read from a Manager when scraped: the
// sessions alive and the sandboxes waiting in warm pools. Call it once.
func (m *Metrics) WatchManager(mgr *session.Manager) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "airlock", Name: "sessions_active", Help: "Sessions alive."},
			func() float64 { return float64(mgr.Count()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "airlock", Name: "pool_ready", Help: "Sandboxes waiting in the warm pools."},
			func() float64 { return float64(mgr.PoolReady()) }))
}

// Event implements session.Observer.
func (m *Metrics) Event(e session.Event) {
	be := name(e.Backend)
	switch e.Kind {
	case session.EventCreated:
		m.created.WithLabelValues(be).Inc()
		m.createSeconds.WithLabelValues(be, strconv.FormatBool(e.Pooled)).Observe(e.DurationMS / 1000)
	case session.EventEnded:
		m.ended.WithLabelValues(be).Inc()
	case session.EventPoolHit:
		m.poolHits.WithLabelValues(be).Inc()
	case session.EventPoolMiss:
		m.poolMisses.WithLabelValues(be).Inc()
	case session.EventExec, session.EventCode:
		kind := "exec"
		if e.Kind == session.EventCode {
			kind = "code"
		}
		m.runs.WithLabelValues(kind, be).Inc()
		m.runSeconds.WithLabelValues(kind, be).Observe(e.DurationMS / 1000)
		if e.Error != "" {
			m.runErrors.WithLabelValues(kind).Inc()
		}
		if e.TimedOut {
			m.timeouts.WithLabelValues(kind).Inc()
		}
		if e.OOMKilled {
			m.ooms.WithLabelValues(kind).Inc()
		}
		if e.PidsLimitHit {
			m.pids.WithLabelValues(kind).Inc()
		}
	case session.EventEgress:
		if e.Egress != nil {
			d := "denied"
			if e.Egress.Allowed {
				d = "allowed"
			}
			m.egress.WithLabelValues(d).Inc()
		}
	case session.EventArtifact:
		if e.Artifact != nil {
			v := e.Artifact.Verdict
			switch v {
			case sandbox.VerdictAccepted, sandbox.VerdictSanitized, sandbox.VerdictRejected:
			default:
				v = "other"
			}
			m.artifacts.WithLabelValues(v).Inc()
		}
	}
}

// name keeps a backend's name as a label when it looks like one (the
// Manager only reports the backends it serves), else "other".
func name(s string) string {
	if s == "" || len(s) > 32 {
		return "other"
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return "other"
		}
	}
	return s
}

// AuditError counts an audit record that could not be stored; it fits
// audit.RecorderOptions.OnError.
func (m *Metrics) AuditError(error) { m.auditErrors.Inc() }

// Handler serves the metrics in Prometheus's formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Instrument counts the requests h serves by route and status and times
// them by route. The route is the pattern of http.ServeMux that matched
// (r.Pattern, "POST /v1/sessions/{id}/exec"), never the path, so that
// session ids and file names make no labels; a request no pattern matched
// is "unmatched". h must route with an http.ServeMux on the very request
// it is given.
func (m *Metrics) Instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			m.requestSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // not an informational 1xx
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
