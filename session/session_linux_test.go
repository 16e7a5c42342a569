package session_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

func TestMain(m *testing.M) {
	os.Exit(backendtest.Main(m, func() []string { return nil }))
}

// clock is a test clock the Manager reads.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newManager(t *testing.T, edit func(*session.Options)) *session.Manager {
	t.Helper()
	testenv.Require(t, "root: sessions run native sandboxes as root here", testenv.Root())
	o := session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})}}
	if edit != nil {
		edit(&o)
	}
	m, err := session.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

func exec(t *testing.T, s *session.Session, script string) sandbox.Result {
	t.Helper()
	res, err := s.Exec(context.Background(), sandbox.ProcessSpec{Cmd: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// TestSessionSteps: files and processes persist between the steps of a
// session; owners see only their own sessions.
func TestSessionSteps(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, session.CreateOptions{Owner: "alice", Metadata: map[string]string{"task": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "/workspace/input/data.csv", strings.NewReader("a,b\n1,2\n"), 0); err != nil {
		t.Fatal(err)
	}
	exec(t, s, "cat /workspace/input/data.csv > /tmp/step1.csv && echo '=1+1,x' >> /tmp/step1.csv")
	res := exec(t, s, "cat /tmp/step1.csv > /workspace/output/out.csv; wc -l < /tmp/step1.csv")
	if strings.TrimSpace(res.Stdout) != "3" {
		t.Errorf("the second step saw %q", res.Stdout)
	}
	arts, err := s.Artifacts(ctx)
	if err != nil || len(arts) != 1 || arts[0].Verdict != sandbox.VerdictSanitized {
		t.Errorf("artifacts: %+v %v", arts, err)
	}
	if _, err := m.Get("bob", s.ID()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another owner's Get: %v, want ErrNotFound", err)
	}
	if err := m.Destroy(ctx, "bob", s.ID()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another owner's Destroy: %v, want ErrNotFound", err)
	}
	if l := m.List("bob"); len(l) != 0 {
		t.Errorf("bob lists %d sessions", len(l))
	}
	if l := m.List("alice"); len(l) != 1 || l[0].ID != s.ID() || l[0].Metadata["task"] != "t1" {
		t.Errorf("alice lists %+v", l)
	}
	if err := m.Destroy(ctx, "alice", s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("alice", s.ID()); !errors.Is(err, session.ErrEnded) {
		t.Errorf("Get of a destroyed session: %v, want ErrEnded", err)
	}
	if _, err := s.Exec(ctx, sandbox.ProcessSpec{Cmd: []string{"true"}}); !errors.Is(err, session.ErrEnded) {
		t.Errorf("Exec in a destroyed session: %v, want ErrEnded", err)
	}
}

// TestSessionExpiry: the TTL and the idle timeout end sessions, and a
// call in progress holds the idle timeout off.
func TestSessionExpiry(t *testing.T) {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	m := newManager(t, func(o *session.Options) { o.Now = c.now; o.ReapEvery = 10 * time.Millisecond })
	ctx := context.Background()
	ttl, err := m.Create(ctx, session.CreateOptions{Owner: "o", TTL: time.Minute, IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := m.Create(ctx, session.CreateOptions{Owner: "o", TTL: time.Hour, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := m.Create(ctx, session.CreateOptions{Owner: "o", TTL: time.Hour, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	finished := make(chan sandbox.Result, 1)
	go func() {
		p, err := busy.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"sleep", "1"}})
		close(started)
		if err == nil {
			r, _ := p.Wait(ctx)
			finished <- r
		}
	}()
	<-started
	c.advance(2 * time.Minute)
	waitEnded := func(s *session.Session, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := m.Get("o", s.ID()); err != nil {
				if !errors.Is(err, session.ErrEnded) || !strings.Contains(err.Error(), want) {
					t.Errorf("session %s: %v, want ended, %s", s.ID(), err, want)
				}
				select {
				case <-s.Instance().Done():
				case <-time.After(10 * time.Second):
					t.Errorf("session %s ended but its sandbox was not destroyed", s.ID())
				}
				return
			}
		}
		t.Errorf("session %s did not end (%s)", s.ID(), want)
	}
	waitEnded(ttl, "TTL")
	waitEnded(idle, "idle")
	// the busy session started a background process, not a call in
	// progress: it ends idle too
	waitEnded(busy, "idle")
}

// TestSessionCaps: the caps on sessions in all and per owner.
func TestSessionCaps(t *testing.T) {
	m := newManager(t, func(o *session.Options) {
		o.MaxSessions = 3
		o.Quota = func(owner string) session.Quota {
			return session.Quota{Sessions: 2, MemoryBytes: 768 << 20}
		}
	})
	ctx := context.Background()
	mk := func(owner string, mem int64) error {
		_, err := m.Create(ctx, session.CreateOptions{Owner: owner, Policy: sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: mem}}})
		return err
	}
	if err := mk("a", 512<<20); err != nil {
		t.Fatal(err)
	}
	if err := mk("a", 512<<20); !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("over a's memory quota: %v", err)
	}
	if err := mk("a", 128<<20); err != nil {
		t.Fatal(err)
	}
	if err := mk("a", 128<<20); !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "sessions") {
		t.Errorf("over a's session quota: %v", err)
	}
	if err := mk("b", 128<<20); err != nil {
		t.Fatal(err)
	}
	if err := mk("c", 128<<20); !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "most this server runs") {
		t.Errorf("over the server's cap: %v", err)
	}
	if m.Count() != 3 {
		t.Errorf("%d sessions, want 3", m.Count())
	}
}

// TestPoolNeverReused: a pooled sandbox goes to one session only, and the
// pool refills.
func TestPoolNeverReused(t *testing.T) {
	m := newManager(t, func(o *session.Options) {
		o.Pools = []session.PoolSpec{{Backend: "native", Image: "host", Size: 2}}
	})
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); m.PoolReady() < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	if m.PoolReady() != 2 {
		t.Fatalf("the pool holds %d sandboxes, want 2", m.PoolReady())
	}
	seen := map[string]bool{}
	for k := range 6 {
		s, err := m.Create(ctx, session.CreateOptions{Owner: "o"})
		if err != nil {
			t.Fatal(err)
		}
		if seen[s.ID()] {
			t.Fatalf("sandbox %s handed out twice", s.ID())
		}
		seen[s.ID()] = true
		// a mark left by one session must never be seen by the next
		res := exec(t, s, "ls /tmp; echo mark > /tmp/mark-"+s.ID())
		if strings.Contains(res.Stdout, "mark-") {
			t.Errorf("session %d sees a previous session's file: %q", k, res.Stdout)
		}
		if err := s.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	info := m.List("o")
	if len(info) != 0 {
		t.Errorf("%d sessions left", len(info))
	}
}

// TestRunOnce: the one-shot session of airlock run leaves nothing.
func TestRunOnce(t *testing.T) {
	m := newManager(t, nil)
	dir := t.TempDir()
	in := dir + "/in.txt"
	if err := os.WriteFile(in, []byte("input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inputs, err := session.ParseInputs([]string{in})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.RunOnce(context.Background(), session.OneShot{Inputs: inputs,
		Process: sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "cat /workspace/input/in.txt | tee /workspace/output/copy.txt"}}})
	if err != nil || res.Stdout != "input\n" || len(res.Artifacts) != 1 {
		t.Errorf("run once: %+v %v", res, err)
	}
	if m.Count() != 0 {
		t.Errorf("%d sessions after a one-shot run", m.Count())
	}
}

// events is an Observer that keeps every event.
type events struct {
	mu  sync.Mutex
	all []session.Event
}

func (e *events) Event(ev session.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) of(kind string) []session.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []session.Event
	for _, ev := range e.all {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// TestObserverEvents: a session's life reaches the Observer, with the
// owner, how long the create took and whether a pool served it.
func TestObserverEvents(t *testing.T) {
	ev := &events{}
	m := newManager(t, func(o *session.Options) {
		o.Observer = ev
		o.Pools = []session.PoolSpec{{Backend: "native", Image: "host", Size: 1}}
	})
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); m.PoolReady() < 1 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	s, err := m.Create(ctx, session.CreateOptions{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, s, "echo hi; echo x > /workspace/output/a.txt; exit 3")
	if _, err := s.Artifacts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	// The pool is empty now (its refill may not be ready): a second
	// session may or may not come from it.
	s2, err := m.Create(ctx, session.CreateOptions{Owner: "bob", Policy: sandbox.Policy{Limits: sandbox.Limits{Pids: 99}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	created := ev.of(session.EventCreated)
	if len(created) != 2 || created[0].Owner != "alice" || !created[0].Pooled || created[1].Owner != "bob" || created[1].Pooled {
		t.Fatalf("created events %+v: want alice's pooled, bob's (another policy) not", created)
	}
	for _, c := range created {
		if c.DurationMS <= 0 || c.Session == "" || c.Image != "host" || c.Backend != "native" {
			t.Errorf("created event %+v: want its duration, session, image and backend", c)
		}
	}
	if hits := ev.of(session.EventPoolHit); len(hits) != 1 || hits[0].Backend != "native" {
		t.Errorf("pool hits %+v, want one", hits)
	}
	execs := ev.of(session.EventExec)
	if len(execs) != 1 || execs[0].Owner != "alice" || execs[0].ExitCode != 3 || execs[0].StdoutBytes != 3 || !strings.Contains(execs[0].What, "echo hi") {
		t.Errorf("exec events %+v", execs)
	}
	arts := ev.of(session.EventArtifact)
	if len(arts) != 1 || arts[0].Artifact == nil || arts[0].Artifact.Path != "a.txt" || arts[0].Owner != "alice" {
		t.Errorf("artifact events %+v", arts)
	}
	if ended := ev.of(session.EventEnded); len(ended) != 2 || ended[0].Detail != "destroyed" {
		t.Errorf("ended events %+v", ended)
	}
}
