package audit

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/session"
)

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	// Timeout bounds how long one event may wait for its record to be
	// stored; 0 means 10 seconds.
	Timeout time.Duration
	// Logger receives the records that could not be stored; nil discards
	// them.
	Logger *slog.Logger
	// OnError is called when a record could not be stored, for a metric;
	// nil is nothing.
	OnError func(error)
}

// Recorder is a session.Observer that writes an audit record for each
// event a tenant caused. It stores the record before Event returns, so
// that the call which caused it (an exec, say) answers only once its
// record is in the log. A record that cannot be stored is logged, not
// fatal to the call.
type Recorder struct {
	store Store
	o     RecorderOptions
}

var _ session.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder that writes to s.
func NewRecorder(s Store, o RecorderOptions) *Recorder {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Recorder{store: s, o: o}
}

// Event implements session.Observer.
func (r *Recorder) Event(e session.Event) {
	rec, ok := Record(e)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.o.Timeout)
	defer cancel()
	if err := r.store.Append(ctx, rec); err != nil {
		r.o.Logger.Error("an audit record could not be stored", "kind", rec.Kind, "tenant", rec.Tenant, "session", rec.Session, "err", err)
		if r.o.OnError != nil {
			r.o.OnError(err)
		}
	}
}

// Record maps a session event to its audit record; false for the events
// that are no tenant's doing (a warm pool's hit or miss, which metrics
// count and a session_created record marks as "pooled"). An event of a
// kind this code does not know yet is still recorded, with its own kind
// and its generic fields.
func Record(e session.Event) (api.AuditRecord, bool) {
	rec := api.AuditRecord{Time: e.Time, Tenant: e.Owner, Kind: e.Kind, Session: e.Session, Backend: e.Backend,
		What: e.What, Detail: e.Detail}
	switch e.Kind {
	case session.EventPoolHit, session.EventPoolMiss:
		return api.AuditRecord{}, false
	case session.EventCreated:
		rec.What = e.Image
		rec.DurationMS = e.DurationMS
		if e.Pooled {
			rec.Detail = join(rec.Detail, "pooled")
		}
	case session.EventEnded:
	case session.EventExec, session.EventCode:
		rec.ExitCode, rec.TimedOut, rec.OOMKilled, rec.PidsLimitHit = e.ExitCode, e.TimedOut, e.OOMKilled, e.PidsLimitHit
		rec.DurationMS = e.DurationMS
		rec.Bytes = e.StdoutBytes + e.StderrBytes
	case session.EventEgress:
		if g := e.Egress; g != nil {
			rec.What = net.JoinHostPort(g.Host, strconv.Itoa(g.Port))
			rec.Bytes = g.BytesIn + g.BytesOut
			decision := "denied"
			if g.Allowed {
				decision = "allowed"
			}
			rec.Detail = because(decision, g.Reason)
		}
	case session.EventArtifact:
		if a := e.Artifact; a != nil {
			rec.What = a.Path
			rec.Bytes = a.Size
			rec.Detail = because(a.Verdict, a.Reason)
		}
	default:
		rec.ExitCode, rec.TimedOut, rec.OOMKilled, rec.PidsLimitHit = e.ExitCode, e.TimedOut, e.OOMKilled, e.PidsLimitHit
		rec.DurationMS = e.DurationMS
		rec.Bytes = e.StdoutBytes + e.StderrBytes
	}
	if e.Error != "" {
		rec.Detail = join(rec.Detail, "error: "+e.Error)
	}
	return rec, true
}

// because is a verdict or decision with its reason, if any.
func because(word, reason string) string {
	if reason == "" {
		return word
	}
	return word + ": " + reason
}

// join joins independent parts of a detail with "; ", leaving out an
// empty one.
func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
