package image

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestCommandOutputCountsAndKeepsTheTail(t *testing.T) {
	var shown, log bytes.Buffer
	p := newProgress(&shown, time.Now())
	out := &cmdOutput{log: &log, prog: p}
	input := "I: Retrieving libc6 2.36\nI: Unpacking libc6:amd64...\nI: Unpacking bash...\n" +
		"10 upgraded, 179 newly installed, 0 to remove and 0 not upgraded.\n" +
		"Unpacking python3.11-minimal (3.11.2-6) ...\nUnpacking python3-minimal (3.11.2-1) ...\n"
	for i := range input {
		// One byte at a time: lines split across writes still count once.
		out.Write([]byte{input[i]})
	}
	out.Write([]byte("E: half a line"))
	if log.String() != input+"E: half a line" {
		t.Fatalf("log copy %q", log.String())
	}
	if p.unpacked != 2 || p.total != 189 {
		t.Fatalf("unpacked %d of %d, want 2 of 189 (counting restarts when apt-get announces its total)", p.unpacked, p.total)
	}
	p.status()
	if !strings.Contains(shown.String(), "packages unpacked: 2/189") {
		t.Fatalf("status line %q", shown.String())
	}
	if tail := out.tail(); !strings.HasSuffix(tail, "Unpacking python3-minimal (3.11.2-1) ...\nE: half a line") {
		t.Fatalf("tail %q", tail)
	}
	for i := 0; i < 2*tailLines; i++ {
		out.Write([]byte("line\n"))
	}
	if n := strings.Count(out.tail(), "\n") + 1; n != tailLines {
		t.Fatalf("tail keeps %d lines, want %d", n, tailLines)
	}
}
