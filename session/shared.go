package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Sessions shared between airlock processes: a backend whose sandboxes
// another airlock process can reach (sandbox.Recoverer, the kubernetes
// backend) keeps each session's Record beside its sandbox, and any
// process that serves the backend finds the session there, uses it and
// destroys it. Each process that holds a shared session reaps it at its
// TTL; the idle timeout counts the uses of every process (Touch).

// recoverWait bounds the recovery of a session that another process
// created.
const recoverWait = 30 * time.Second

// record is the session's Record.
func (s *Session) record() sandbox.Record {
	return sandbox.Record{Owner: s.owner, Backend: s.backend, Image: s.image.Name, Created: s.created,
		Expires: s.expiresAt(), Idle: sandbox.Duration(s.idle), Metadata: cloneMap(s.metadata), Pooled: s.pooled,
		Policy: s.policy}
}

// publish stores the session's Record beside its sandbox, when the
// backend keeps one.
func (s *Session) publish(ctx context.Context) error {
	r, ok := s.inst.(sandbox.Recorder)
	if !ok {
		return nil
	}
	return r.SetRecord(ctx, s.record())
}

// touch tells the backend that the session was used, when it keeps the
// time for other processes.
func (s *Session) touch() {
	if r, ok := s.inst.(sandbox.Recorder); ok {
		r.Touch()
	}
}

// lastUse is when the session was last used, by this process or, for a
// shared session, by any.
func (s *Session) lastUse() time.Time {
	last := time.Unix(0, s.lastUsed.Load())
	if r, ok := s.inst.(sandbox.Recorder); ok {
		if t := r.Touched(); t.After(last) {
			return t
		}
	}
	return last
}

// Find is Get, and for a session this process does not hold, the
// recovery of one that another airlock process created on a backend that
// shares its sandboxes (sandbox.Recoverer): owner's session id, from the
// Record kept beside its sandbox.
func (m *Manager) Find(ctx context.Context, owner, id string) (*Session, error) {
	s, err := m.Get(owner, id)
	if err == nil || !errors.Is(err, sandbox.ErrNotFound) {
		return s, err
	}
	ctx, cancel := context.WithTimeout(ctx, recoverWait)
	defer cancel()
	for _, name := range sortedKeys(m.opts.Backends) {
		rc, ok := m.opts.Backends[name].(sandbox.Recoverer)
		if !ok {
			continue
		}
		inst, rec, rerr := rc.Recover(ctx, id)
		if rerr != nil {
			if errors.Is(rerr, sandbox.ErrNotFound) {
				continue
			}
			return nil, rerr
		}
		if rec.Owner != owner {
			return nil, err
		}
		return m.adopt(ctx, name, inst, rec)
	}
	return nil, err
}

// adopt makes a recovered sandbox one of this Manager's sessions, with
// its own egress proxy (which takes the sandbox's egress over from the
// process that had it).
func (m *Manager) adopt(ctx context.Context, backend string, inst sandbox.Instance, rec sandbox.Record) (*Session, error) {
	m.mu.Lock()
	if s, ok := m.sessions[inst.ID()]; ok {
		m.mu.Unlock()
		return s, nil
	}
	m.mu.Unlock()
	pol := rec.Policy
	s := &Session{m: m, id: inst.ID(), backend: backend, image: sandbox.Image{Name: rec.Image}, policy: pol, inst: inst,
		procs: map[string]*Process{}, contexts: map[string]*codeContext{},
		owner: rec.Owner, metadata: cloneMap(rec.Metadata), created: rec.Created, expires: rec.Expires,
		idle: time.Duration(rec.Idle), pooled: rec.Pooled}
	s.lastUsed.Store(s.lastUse().UnixNano())
	proxy, err := egress.Attach(ctx, inst, egress.Options{Policy: pol.Network, Logger: m.log.With("session", s.id), Hooks: m.opts.EgressHooks})
	if err != nil {
		return nil, fmt.Errorf("session %s: its egress: %w", s.id, err)
	}
	s.proxy = proxy
	m.mu.Lock()
	if old, ok := m.sessions[s.id]; ok {
		m.mu.Unlock()
		if proxy != nil {
			_ = proxy.Close()
		}
		return old, nil
	}
	if m.closed {
		m.mu.Unlock()
		if proxy != nil {
			_ = proxy.Close()
		}
		return nil, fmt.Errorf("session manager closed: %w", sandbox.ErrDestroyed)
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	go m.watch(s)
	m.opts.Observer.Event(Event{Kind: EventAdopted, Session: s.id, Owner: s.owner, Time: m.now(), Backend: backend, Image: rec.Image})
	m.log.Info("session adopted from another airlock process", "id", s.id, "owner", s.owner, "backend", backend)
	return s, nil
}
