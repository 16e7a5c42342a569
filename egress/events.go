package egress

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// maxEventHost caps how much of a client-chosen host an event keeps.
const maxEventHost = 255

// eventLog keeps every decision in order and logs it.
type eventLog struct {
	log     *slog.Logger
	mu      sync.Mutex
	events  []sandbox.EgressEvent
	dropped int
}

// record stores and logs one event and returns its index, or -1 when the
// log is full.
func (l *eventLog) record(ctx context.Context, ev sandbox.EgressEvent) int {
	ev.Host = cleanHost(ev.Host)
	level := slog.LevelInfo
	if !ev.Allowed {
		level = slog.LevelWarn
	}
	l.log.Log(ctx, level, "egress decision", "host", ev.Host, "port", ev.Port, "allowed", ev.Allowed, "reason", ev.Reason)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) >= maxEvents {
		l.dropped++
		return -1
	}
	l.events = append(l.events, ev)
	return len(l.events) - 1
}

// addBytes adds traffic to the event at index i.
func (l *eventLog) addBytes(i int, sent, got int64) {
	if i < 0 {
		return
	}
	l.mu.Lock()
	l.events[i].BytesOut += sent
	l.events[i].BytesIn += got
	l.mu.Unlock()
}

// kept is the number of events stored.
func (l *eventLog) kept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// snapshot copies the events from index from on; when some were dropped,
// a last event says how many.
func (l *eventLog) snapshot(from int) []sandbox.EgressEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := append([]sandbox.EgressEvent(nil), l.events[min(from, len(l.events)):]...)
	if l.dropped > 0 {
		evs = append(evs, sandbox.EgressEvent{Reason: fmt.Sprintf("%d more events were not kept (cap %d)", l.dropped, maxEvents)})
	}
	return evs
}

// cleanHost makes a client-chosen host safe to store and print: valid
// UTF-8, no control characters, bounded length.
func cleanHost(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, s)
	if len(s) > maxEventHost {
		s = strings.ToValidUTF8(s[:maxEventHost], "") + "…"
	}
	return s
}
