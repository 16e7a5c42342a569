package session_test

import (
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/session"
)

// kinds is an Observer that keeps the kinds of the events it sees.
type kinds struct {
	name string
	seen *[]string
}

func (k kinds) Event(e session.Event) { *k.seen = append(*k.seen, k.name+":"+e.Kind) }

// TestObservers: every event reaches each observer, in order; nil ones
// are skipped.
func TestObservers(t *testing.T) {
	var seen []string
	o := session.Observers(kinds{"a", &seen}, nil, kinds{"b", &seen})
	o.Event(session.Event{Kind: session.EventExec})
	o.Event(session.Event{Kind: session.EventEnded})
	want := []string{"a:exec", "b:exec", "a:session_ended", "b:session_ended"}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("events seen %v, want %v", seen, want)
	}
	session.Observers().Event(session.Event{Kind: session.EventExec}) // none: nothing happens
	session.Observers(nil).Event(session.Event{Kind: session.EventExec})
}
