package tools

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClip: long text keeps its head and tail, says how much it left
// out, and is never cut inside a character; short text is unchanged.
func TestClip(t *testing.T) {
	if got := Clip("short\n", 100); got != "short\n" {
		t.Errorf("short text changed: %q", got)
	}
	var b strings.Builder
	for i := 0; i < 2000; i++ {
		b.WriteString("line é ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	s := "FIRST\n" + b.String() + "LAST\n"
	got := Clip(s, 1000)
	if len(got) > 1100 || !strings.HasPrefix(got, "FIRST\n") || !strings.HasSuffix(got, "LAST\n") {
		t.Errorf("clip lost the ends or the budget: %d bytes, %q…%q", len(got), got[:20], got[len(got)-20:])
	}
	if !strings.Contains(got, "elided …]") || !utf8.ValidString(got) {
		t.Errorf("no elision note or invalid UTF-8: %q", got)
	}
	runes := strings.Repeat("ж", 1000) // two bytes each, no newline
	if got := Clip(runes, 301); !utf8.ValidString(got) {
		t.Errorf("cut inside a character: %q", got)
	}
}

// TestTraceback: a long traceback keeps its header, its last frames and
// the error, without terminal colours.
func TestTraceback(t *testing.T) {
	lines := []string{"\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
		"Traceback (most recent call last):"}
	for i := 0; i < 30; i++ {
		lines = append(lines, "  File \"<cell>\", line 3, in f", "    return g(x)")
	}
	lines = append(lines, "  File \"<cell>\", line 9, in last_frame", "ZeroDivisionError: division by zero")
	got := Traceback(lines)
	if strings.Contains(got, "\x1b") {
		t.Errorf("colours kept: %q", got)
	}
	if !strings.Contains(got, "last_frame") || !strings.HasSuffix(got, "ZeroDivisionError: division by zero") ||
		!strings.Contains(got, "lines of earlier frames left out") || strings.Count(got, "\n") > maxTraceLines {
		t.Errorf("traceback:\n%s", got)
	}
	if got := Traceback([]string{"ValueError: x"}); got != "ValueError: x" {
		t.Errorf("short traceback changed: %q", got)
	}
}

// TestResolve: relative paths are under /workspace; nothing outside the
// three folders resolves.
func TestResolve(t *testing.T) {
	for in, want := range map[string]string{"output/a.csv": "/workspace/output/a.csv", "/tmp/x": "/tmp/x",
		"input/../output/b": "/workspace/output/b", "/workspace/input": "/workspace/input"} {
		if got, err := Resolve(in); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/etc/passwd", "../../etc/passwd", "a.csv", "/workspace", "/tmpx", "/tmp/\x00"} {
		if got, err := Resolve(in); err == nil {
			t.Errorf("Resolve(%q) = %q, want an error", in, got)
		}
	}
}
