package session

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Get finds owner's session id. Another owner's session, or none, is
// ErrNotFound; one that ended is ErrEnded, saying why.
func (m *Manager) Get(owner, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok && s.owner == owner {
		return s, nil
	}
	if t, ok := m.ended[id]; ok && t.owner == owner {
		return nil, fmt.Errorf("session %s %s at %s: %w", id, t.reason, t.at.UTC().Format(time.RFC3339), ErrEnded)
	}
	return nil, fmt.Errorf("session %s: %w", id, sandbox.ErrNotFound)
}

// List describes owner's sessions, oldest first.
func (m *Manager) List(owner string) []Info {
	m.mu.Lock()
	var out []Info
	for _, s := range m.sessions {
		if s.owner == owner {
			out = append(out, s.Info())
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Count is how many sessions run.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Destroy ends owner's session id.
func (m *Manager) Destroy(ctx context.Context, owner, id string) error {
	s, err := m.Find(ctx, owner, id)
	if err != nil {
		return err
	}
	return m.end(ctx, s, "destroyed")
}

// end takes s out of the running sessions, remembers why, and destroys
// it. Ending a session twice is not an error.
func (m *Manager) end(ctx context.Context, s *Session, reason string) error {
	m.mu.Lock()
	_, live := m.sessions[s.id]
	if live {
		delete(m.sessions, s.id)
		if len(m.ended) >= maxTombstones {
			m.pruneTombstones(m.now().Add(tombstoneTTL))
		}
		m.ended[s.id] = tombstone{owner: s.owner, reason: reason, at: m.now()}
	}
	m.mu.Unlock()
	err := s.destroy(ctx, reason)
	if live {
		m.opts.Observer.Event(Event{Kind: EventEnded, Session: s.id, Owner: s.owner, Time: m.now(), Backend: s.backend, Detail: reason})
		m.log.Info("session ended", "id", s.id, "owner", s.owner, "reason", reason)
	}
	return err
}

// pruneTombstones forgets ended sessions older than the TTL before now,
// and the oldest ones beyond the cap.
func (m *Manager) pruneTombstones(now time.Time) {
	for id, t := range m.ended {
		if now.Sub(t.at) > tombstoneTTL {
			delete(m.ended, id)
		}
	}
	for len(m.ended) >= maxTombstones {
		var oldest string
		var at time.Time
		for id, t := range m.ended {
			if oldest == "" || t.at.Before(at) {
				oldest, at = id, t.at
			}
		}
		delete(m.ended, oldest)
	}
}

// watch ends a session whose sandbox died by itself.
func (m *Manager) watch(s *Session) {
	select {
	case <-s.inst.Done():
	case <-m.stop:
		return
	}
	if err := s.inst.Err(); err != nil && !errIs(err, sandbox.ErrDestroyed) {
		_ = m.end(context.Background(), s, "its sandbox died: "+err.Error())
	}
}

// reap ends the sessions whose TTL or idle timeout passed.
func (m *Manager) reap() {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.reapOnce()
	}
}

// reapOnce ends what is due now.
func (m *Manager) reapOnce() {
	now := m.now()
	type due struct {
		s      *Session
		reason string
	}
	var dues []due
	m.mu.Lock()
	for _, s := range m.sessions {
		switch {
		case now.After(s.expiresAt()):
			dues = append(dues, due{s, "expired (its TTL passed)"})
		case s.busy.Load() == 0 && now.Sub(s.lastUse()) > s.idle:
			dues = append(dues, due{s, fmt.Sprintf("ended after %v idle", s.idle)})
		}
	}
	m.pruneTombstones(now)
	m.mu.Unlock()
	for _, d := range dues {
		_ = m.end(context.Background(), d.s, d.reason)
	}
}

// Close destroys every session and pooled sandbox, stops the reaper and
// closes the backends.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait()
	var errs []error
	for _, s := range all {
		if err := m.end(ctx, s, "the server shut down"); err != nil {
			errs = append(errs, err)
		}
	}
	m.stopPools()
	for _, name := range sortedKeys(m.opts.Backends) {
		if err := m.opts.Backends[name].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrs(errs)
}
