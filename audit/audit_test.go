package audit_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// TestRecord maps every kind of event the session Manager emits.
func TestRecord(t *testing.T) {
	base := session.Event{Time: at, Session: "s1", Owner: "alice", Backend: "native"}
	ev := func(edit func(*session.Event)) session.Event {
		e := base
		edit(&e)
		return e
	}
	want := func(edit func(*api.AuditRecord)) api.AuditRecord {
		r := api.AuditRecord{Time: at, Tenant: "alice", Session: "s1", Backend: "native"}
		edit(&r)
		return r
	}
	cases := []struct {
		name string
		ev   session.Event
		want api.AuditRecord
	}{
		{"created", ev(func(e *session.Event) {
			e.Kind, e.Image, e.Detail, e.DurationMS, e.Pooled = session.EventCreated, "python", "memory 512MiB", 40, true
		}), want(func(r *api.AuditRecord) {
			r.Kind, r.What, r.Detail, r.DurationMS = session.EventCreated, "python", "memory 512MiB; pooled", 40
		})},
		{"ended", ev(func(e *session.Event) { e.Kind, e.Detail = session.EventEnded, "destroyed" }),
			want(func(r *api.AuditRecord) { r.Kind, r.Detail = session.EventEnded, "destroyed" })},
		{"exec", ev(func(e *session.Event) {
			e.Kind, e.What, e.ExitCode, e.TimedOut, e.OOMKilled, e.PidsLimitHit = session.EventExec, "sh -c x", 137, true, true, true
			e.DurationMS, e.StdoutBytes, e.StderrBytes = 12, 100, 20
		}), want(func(r *api.AuditRecord) {
			r.Kind, r.What, r.ExitCode, r.TimedOut, r.OOMKilled, r.PidsLimitHit = session.EventExec, "sh -c x", 137, true, true, true
			r.DurationMS, r.Bytes = 12, 120
		})},
		{"exec error", ev(func(e *session.Event) { e.Kind, e.What, e.Error = session.EventExec, "x", "sandbox died" }),
			want(func(r *api.AuditRecord) { r.Kind, r.What, r.Detail = session.EventExec, "x", "error: sandbox died" })},
		{"code", ev(func(e *session.Event) {
			e.Kind, e.What, e.ExitCode, e.DurationMS = session.EventCode, "import pandas", 1, 5
		}),
			want(func(r *api.AuditRecord) {
				r.Kind, r.What, r.ExitCode, r.DurationMS = session.EventCode, "import pandas", 1, 5
			})},
		{"egress allowed", ev(func(e *session.Event) {
			e.Kind, e.Egress = session.EventEgress, &sandbox.EgressEvent{Host: "example.com", Port: 443, Allowed: true, BytesIn: 10, BytesOut: 5}
		}), want(func(r *api.AuditRecord) {
			r.Kind, r.What, r.Detail, r.Bytes = session.EventEgress, "example.com:443", "allowed", 15
		})},
		{"egress denied", ev(func(e *session.Event) {
			e.Kind, e.Egress = session.EventEgress, &sandbox.EgressEvent{Host: "::1", Port: 80, Reason: "loopback"}
		}), want(func(r *api.AuditRecord) {
			r.Kind, r.What, r.Detail = session.EventEgress, "[::1]:80", "denied: loopback"
		})},
		{"artifact", ev(func(e *session.Event) {
			e.Kind, e.Artifact = session.EventArtifact, &sandbox.Artifact{Path: "out.csv", Size: 120, Verdict: "sanitized", Reason: "2 cells"}
		}), want(func(r *api.AuditRecord) {
			r.Kind, r.What, r.Bytes, r.Detail = session.EventArtifact, "out.csv", 120, "sanitized: 2 cells"
		})},
		{"a kind to come", ev(func(e *session.Event) { e.Kind, e.What, e.ExitCode = "context_created", "python", 3 }),
			want(func(r *api.AuditRecord) { r.Kind, r.What, r.ExitCode = "context_created", "python", 3 })},
	}
	for _, c := range cases {
		got, ok := audit.Record(c.ev)
		if !ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v %v\nwant %+v", c.name, got, ok, c.want)
		}
	}
	for _, k := range []string{session.EventPoolHit, session.EventPoolMiss} {
		if r, ok := audit.Record(session.Event{Kind: k, Time: at, Backend: "native"}); ok {
			t.Errorf("%s is no tenant's doing, yet makes a record: %+v", k, r)
		}
	}
}

// failing is a Store whose appends fail.
type failing struct{ audit.Store }

func (failing) Append(context.Context, ...api.AuditRecord) error { return errors.New("disk full") }

// TestRecorder: events land in the store before Event returns; a failure
// is reported, not fatal.
func TestRecorder(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	r := audit.NewRecorder(s, audit.RecorderOptions{})
	r.Event(session.Event{Kind: session.EventExec, Time: at, Owner: "alice", What: strings.Repeat("x", 1000)})
	r.Event(session.Event{Kind: session.EventPoolHit, Time: at})
	got, err := s.Query(context.Background(), "alice", 0, 10)
	if err != nil || len(got) != 1 || len([]rune(got[0].What)) != audit.MaxWhat {
		t.Errorf("after one exec event: %+v, %v; want one record, what cut to %d", got, err, audit.MaxWhat)
	}
	all, _ := s.List(context.Background(), audit.Filter{})
	if len(all) != 1 {
		t.Errorf("a pool hit was recorded: %+v", all)
	}
	var errs atomic.Int32
	fr := audit.NewRecorder(failing{s}, audit.RecorderOptions{OnError: func(error) { errs.Add(1) }})
	fr.Event(session.Event{Kind: session.EventExec, Owner: "alice"})
	if errs.Load() != 1 {
		t.Errorf("OnError called %d times for one failed record", errs.Load())
	}
}

// clock is a test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestRetain: records older than the retention go at once and then as
// they age; newer ones stay.
func TestRetain(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "audit.db"), audit.Options{})
	ctx := context.Background()
	clk := &clock{now: at}
	for _, age := range []time.Duration{72 * time.Hour, 25 * time.Hour, 23 * time.Hour, time.Hour} {
		if err := s.Append(ctx, api.AuditRecord{Time: at.Add(-age), Tenant: "alice", Kind: "exec", What: age.String()}); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		audit.Retain(rctx, s, audit.RetainOptions{Keep: 24 * time.Hour, Every: 5 * time.Millisecond, Now: clk.Now})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			recs, err := s.Query(ctx, "alice", 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.What)
			}
			if strings.Join(got, ",") == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("records %v, want %s", got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("23h0m0s,1h0m0s")
	clk.advance(2 * time.Hour)
	waitFor("1h0m0s")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Retain did not return after its context ended")
	}
	// Keep 0 keeps everything and returns at once.
	audit.Retain(ctx, s, audit.RetainOptions{})
}
