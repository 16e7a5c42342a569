package tools

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Clip keeps the head and the tail of s within about budget bytes and
// says how many bytes it left out between them. It cuts at line ends
// where one is near, and never inside a UTF-8 character.
func Clip(s string, budget int) string {
	if budget < 64 {
		budget = 64
	}
	if len(s) <= budget {
		return s
	}
	half := budget / 2
	head := s[:half]
	if i := strings.LastIndexByte(head, '\n'); i >= half*3/4 {
		head = head[:i+1]
	}
	for len(head) > 0 && !utf8.RuneStart(s[len(head)]) {
		head = head[:len(head)-1]
	}
	tail := s[len(s)-half:]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < half/4 {
		tail = tail[i+1:]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	elided := len(s) - len(head) - len(tail)
	sep := "\n"
	if strings.HasSuffix(head, "\n") {
		sep = ""
	}
	return head + sep + fmt.Sprintf("[… %s elided …]", Bytes(int64(elided))) + "\n" + tail
}

// ansi matches the escape sequences terminals colour text with, which
// IPython puts in its tracebacks.
var ansi = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\\\-_]")

// StripANSI removes terminal escape sequences.
func StripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// maxTraceLines bounds the lines of a traceback kept in an observation.
const maxTraceLines = 14

// Traceback keeps the last frames of a traceback: its first line (the
// "most recent call last" header) and its last lines, where the failing
// frame and the error are, with the count of lines left out.
func Traceback(lines []string) string {
	var all []string
	for _, l := range lines {
		all = append(all, strings.Split(strings.TrimRight(StripANSI(l), "\n"), "\n")...)
	}
	for len(all) > 0 && strings.TrimSpace(all[0]) == "" {
		all = all[1:]
	}
	if len(all) <= maxTraceLines {
		return strings.Join(all, "\n")
	}
	keep := maxTraceLines - 1
	out := []string{all[0], fmt.Sprintf("  [… %d lines of earlier frames left out …]", len(all)-1-keep)}
	return strings.Join(append(out, all[len(all)-keep:]...), "\n")
}

// Bytes writes a size for a person: 512 B, 21.3 KB, 4.1 MB.
func Bytes(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f KB", float64(n)/1000)
	case n < 1000*1000*1000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}
