package artifact

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"a.csv", true},
		{"sub/dir/a.csv", true},
		{"données/été.csv", true},
		{".hidden.csv", true},
		{"", false},
		{"/etc/passwd", false},
		{"../a.csv", false},
		{"a/../b.csv", false},
		{"a/./b.csv", false},
		{"a//b.csv", false},
		{"a/", false},
		{"a\\b.csv", false},
		{"a\x00.csv", false},
		{"a\x01.csv", false},
		{"a\x7f.csv", false},
		{"a\u0085.csv", false},
		{"a\nb.csv", false},
		{"\xff\xfe.csv", false},
		{"gpj\u202e.exe", false},
		{"a\u200b.csv", false},
		{strings.Repeat("a", 256), false},
		{strings.Repeat("a/", 16) + "x.csv", false},
		{strings.Repeat("a/", 15) + "x.csv", true},
		{strings.Repeat("abcdefgh/", 113) + "x", false},
	}
	for _, tt := range tests {
		why := checkPath(tt.path, DefaultMaxDepth, DefaultMaxPathLen)
		if (why == "") != tt.ok {
			t.Errorf("checkPath(%q) = %q, want ok %v", tt.path, why, tt.ok)
		}
	}
}

func TestDisplayPath(t *testing.T) {
	for in, want := range map[string]string{
		"a/b.csv":       "a/b.csv",
		"été.csv":       "été.csv",
		"bad\x01.csv":   `bad\x01.csv`,
		"\xff.csv":      `\xff.csv`,
		"x\u202egpj.sh": `x\u202egpj.sh`,
		"a\\b":          `a\\b`,
	} {
		if got := displayPath(in); got != want {
			t.Errorf("displayPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzPath(f *testing.F) {
	for _, s := range []string{"a/b.csv", "../x", "/abs", "a\x00b", "\xff", "a\u202eb", "a//b", "./a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		why := checkPath(p, DefaultMaxDepth, DefaultMaxPathLen)
		d := displayPath(p)
		if !utf8.ValidString(d) {
			t.Fatalf("displayPath(%q) = %q is not UTF-8", p, d)
		}
		for _, r := range d {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("displayPath(%q) = %q holds a control character", p, d)
			}
		}
		if why != "" {
			return
		}
		// An accepted path stays beneath any folder it is joined to.
		if d != p || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.Contains(p, "\x00") {
			t.Fatalf("accepted %q", p)
		}
		for part := range strings.SplitSeq(p, "/") {
			if part == "" || part == "." || part == ".." {
				t.Fatalf("accepted %q with component %q", p, part)
			}
		}
		if len(p) > DefaultMaxPathLen || strings.Count(p, "/")+1 > DefaultMaxDepth {
			t.Fatalf("accepted %q past the caps", p)
		}
	})
}
