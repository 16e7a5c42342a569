package session

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Observer receives what happens in the sessions of a Manager: the audit
// log and the metrics of a server. Event is called synchronously from the
// goroutine that did the work, so it must not block for long.
type Observer interface {
	Event(Event)
}

// Event kinds.
const (
	EventCreated  = "session_created"
	EventEnded    = "session_ended"
	EventExec     = "exec"
	EventCode     = "code"
	EventEgress   = "egress"
	EventArtifact = "artifact"
	EventPoolHit  = "pool_hit"
	EventPoolMiss = "pool_miss"
)

// Event is one thing that happened. Fields that do not apply are zero.
type Event struct {
	Kind    string    `json:"kind"`
	Time    time.Time `json:"time"`
	Session string    `json:"session,omitempty"`
	Owner   string    `json:"owner,omitempty"`
	Backend string    `json:"backend,omitempty"`
	Image   string    `json:"image,omitempty"`
	// What ran: a command line, or the first line of a code cell.
	What string `json:"what,omitempty"`
	// Of a process or a code call.
	ExitCode     int  `json:"exit_code,omitempty"`
	TimedOut     bool `json:"timed_out,omitempty"`
	OOMKilled    bool `json:"oom_killed,omitempty"`
	PidsLimitHit bool `json:"pids_limit_hit,omitempty"`
	// DurationMS is how long the process or code call ran; of a
	// session_created event, how long the create took.
	DurationMS  float64 `json:"duration_ms,omitempty"`
	StdoutBytes int64   `json:"stdout_bytes,omitempty"`
	StderrBytes int64   `json:"stderr_bytes,omitempty"`
	// Of an egress decision.
	Egress *sandbox.EgressEvent `json:"egress,omitempty"`
	// Of an artifact verdict.
	Artifact *sandbox.Artifact `json:"artifact,omitempty"`
	// Error is an infrastructure failure of the call, if any.
	Error string `json:"error,omitempty"`
	// Detail says anything else: limits of a new session, why one ended.
	Detail string `json:"detail,omitempty"`
	// Pooled tells, of a session_created event, that the session's sandbox
	// came from a warm pool.
	Pooled bool `json:"pooled,omitempty"`
}

// Observers returns an Observer that hands every event to each of obs, in
// order; nil entries are skipped.
func Observers(obs ...Observer) Observer {
	var all multi
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	if len(all) == 0 {
		return discard{}
	}
	return all
}

// multi is the Observer of Observers.
type multi []Observer

func (m multi) Event(e Event) {
	for _, o := range m {
		o.Event(e)
	}
}

// discard is the Observer that keeps nothing.
type discard struct{}

func (discard) Event(Event) {}

// maxWhat bounds what an event keeps of a command or a cell.
const maxWhat = 200

// summarize joins a command line and cuts it to maxWhat runes.
func summarize(cmd []string) string {
	return cut(strings.Join(cmd, " "))
}

func cut(s string) string {
	if r := []rune(s); len(r) > maxWhat {
		return string(r[:maxWhat]) + "…"
	}
	return s
}

// observeResult reports a process's end and the egress decisions it saw.
func (m *Manager) observeResult(s *Session, kind string, cmd []string, res sandbox.Result, err error) {
	now := m.now()
	e := Event{Kind: kind, Time: now, Session: s.id, Owner: s.owner, Backend: s.backend, What: summarize(cmd),
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled, PidsLimitHit: res.PidsLimitHit,
		DurationMS: res.DurationMS, StdoutBytes: int64(len(res.Stdout)), StderrBytes: int64(len(res.Stderr))}
	if err != nil {
		e.Error = err.Error()
	}
	m.opts.Observer.Event(e)
	m.observeEgress(s, res.Egress)
}

// observeEgress reports egress decisions.
func (m *Manager) observeEgress(s *Session, evs []sandbox.EgressEvent) {
	now := m.now()
	for k := range evs {
		ev := evs[k]
		m.opts.Observer.Event(Event{Kind: EventEgress, Time: now, Session: s.id, Owner: s.owner, Backend: s.backend, Egress: &ev})
	}
}

// observeArtifact reports one artifact verdict.
func (m *Manager) observeArtifact(s *Session, a sandbox.Artifact) {
	m.opts.Observer.Event(Event{Kind: EventArtifact, Time: m.now(), Session: s.id, Owner: s.owner, Backend: s.backend, Artifact: &a})
}

// joinErrs joins errors, nil for none.
func joinErrs(errs []error) error { return errors.Join(errs...) }

// errIs tells whether err is one of targets.
func errIs(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// sortedKeys lists a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
