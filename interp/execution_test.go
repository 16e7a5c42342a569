package interp

import (
	"strings"
	"testing"
)

func TestExecutionAdd(t *testing.T) {
	var x Execution
	var passed int
	for i := 0; i < 20; i++ {
		if ev, ok := x.add(Event{Type: EventStdout, Text: strings.Repeat("é", 50)}, 1000); ok {
			passed += len(ev.Text)
		}
	}
	x.add(Event{Type: EventEnd}, 1000)
	x.finish()
	if !x.OutputTruncated || len(x.Stdout) > 1000+outputSlack+100 || len(x.Stdout) != passed {
		t.Errorf("truncated %v, kept %d bytes, passed on %d", x.OutputTruncated, len(x.Stdout), passed)
	}
	if !strings.Contains(x.Stdout, "output truncated") || !utf8Valid(x.Stdout) {
		t.Errorf("the kept output lacks the note or is not UTF-8: %q", x.Stdout[len(x.Stdout)-80:])
	}
	if x.Events[len(x.Events)-1].Type != EventEnd {
		t.Errorf("the end event was not kept")
	}
	var y Execution
	for i := 0; i < maxEvents+10; i++ {
		y.add(Event{Type: EventDisplay, Data: map[string]string{MIMEText: "x"}}, 1000)
	}
	y.add(Event{Type: EventEnd}, 1000)
	if !y.EventsTruncated || len(y.Events) != maxEvents+1 {
		t.Errorf("kept %d events, truncated %v", len(y.Events), y.EventsTruncated)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
