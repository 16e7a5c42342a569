package artifact

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRewriteCSV(t *testing.T) {
	long := strings.Repeat("a", fieldBuf+10)
	tests := []struct {
		name  string
		comma byte
		in    string
		want  string
		stats csvStats
		err   error
	}{
		{name: "clean", in: "a,b\n1,2\n", want: "a,b\n1,2\n"},
		{name: "empty", in: "", want: ""},
		{name: "equals", in: "=1+1,b\n", want: "'=1+1,b\n", stats: csvStats{neutralised: 1}},
		{name: "plain numbers stay", in: "-3.5,+2,1e5,-1e-3,.5\n", want: "-3.5,+2,1e5,-1e-3,.5\n"},
		{name: "minus forms", in: "-,--1,-1-1,-A1\n", want: "'-,'--1,'-1-1,'-A1\n", stats: csvStats{neutralised: 4}},
		{name: "at", in: "@SUM(A1),x\n", want: "'@SUM(A1),x\n", stats: csvStats{neutralised: 1}},
		{name: "plus", in: "+cmd,x", want: "'+cmd,x", stats: csvStats{neutralised: 1}},
		{name: "quoted dde", in: "\"=cmd|' /C calc'!A0\"\n", want: "\"'=cmd|' /C calc'!A0\"\n", stats: csvStats{neutralised: 1}},
		{name: "tab", in: "\"\tfoo\",x\n", want: "\"'\tfoo\",x\n", stats: csvStats{neutralised: 1}},
		{name: "carriage return", in: "\"\rfoo\",x\n", want: "\"'\rfoo\",x\n", stats: csvStats{neutralised: 1}},
		{name: "full-width equals", in: "\uff1d1+1\n", want: "'\uff1d1+1\n", stats: csvStats{neutralised: 1}},
		{name: "bom then formula", in: "\ufeff=1,2\n", want: "\ufeff'=1,2\n", stats: csvStats{neutralised: 1}},
		{name: "crlf kept", in: "a,b\r\n=1,2\r\n", want: "a,b\r\n'=1,2\r\n", stats: csvStats{neutralised: 1}},
		{name: "lone cr", in: "a\rb", want: "a\r\nb", stats: csvStats{lineEnds: 1}},
		{name: "bare quote", in: "a\"b,c\n", want: "\"a\"\"b\",c\n", stats: csvStats{quoted: 1}},
		{name: "text after closing quote", in: "\"ab\"c,d\n", want: "\"abc\",d\n", stats: csvStats{repaired: 1}},
		{name: "unterminated quote", in: "x,\"abc", want: "x,\"abc\"", stats: csvStats{repaired: 1}},
		{name: "doubled quotes kept", in: "\"a\"\"b\",c\n", want: "\"a\"\"b\",c\n"},
		{name: "hidden formula behind semicolon", in: "a;=1,b\n", want: "\"a;=1\",b\n", stats: csvStats{quoted: 1}},
		{name: "semicolon file", comma: ';', in: "a;=1\n", want: "a;'=1\n", stats: csvStats{neutralised: 1}},
		{name: "tsv", comma: '\t', in: "a\t=1\n", want: "a\t'=1\n", stats: csvStats{neutralised: 1}},
		{name: "tsv hidden behind comma", comma: '\t', in: "x,=1\ty\n", want: "\"x,=1\"\ty\n", stats: csvStats{quoted: 1}},
		{name: "empty lines", in: "a\n\nb\n", want: "a\n\nb\n"},
		{name: "trailing separator", in: "a,\nb,", want: "a,\nb,"},
		{name: "newline in quotes", in: "\"a\nb\",c\n", want: "\"a\nb\",c\n"},
		{name: "apostrophe already", in: "'=1\n", want: "'=1\n"},
		{name: "leading space is text", in: " =1\n", want: " =1\n"},
		{name: "long clean cell", in: long + ",x\n", want: "\"" + long + "\",x\n", stats: csvStats{quoted: 1}},
		{name: "long formula cell", in: "=" + long + "\n", want: "\"'=" + long + "\"\n", stats: csvStats{quoted: 1, neutralised: 1}},
		{name: "long quoted cell with quotes", in: "\"" + long + "\"\"x\"\n", want: "\"" + long + "\"\"x\"\n"},
		{name: "nul", in: "a,\x00b\n", err: errBinary},
		{name: "utf-16", in: "\xff\xfea\x00,\x00", err: errBinary},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			comma := tt.comma
			if comma == 0 {
				comma = ','
			}
			var out bytes.Buffer
			st, err := rewriteCSV(strings.NewReader(tt.in), &out, comma)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if got := out.String(); got != tt.want {
				t.Errorf("output\n got %q\nwant %q", truncate(got, 200), truncate(tt.want, 200))
			}
			if st != tt.stats {
				t.Errorf("stats = %+v, want %+v", st, tt.stats)
			}
		})
	}
}

func TestIsPlainNumber(t *testing.T) {
	for in, want := range map[string]bool{
		"1": true, "-1": true, "+1": true, "-3.5": true, "1.": true, ".5": true, "-1e5": true, "2E+10": true,
		"": false, "-": false, "+": false, ".": false, "1e": false, "-1-1": false, "-A1": false,
		"1,5": false, "- 1": false, "0x1A": false, "-1e5+1": false, "1..2": false,
	} {
		if got := isPlainNumber([]byte(in)); got != want {
			t.Errorf("isPlainNumber(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestSniffComma(t *testing.T) {
	for in, want := range map[string]byte{
		"a,b,c\n1;2": ',', "a;b;c\n": ';', "a\tb\tc": '\t', "abc": ',', "\"a;b;c\",d\n": ',', "a;b,c": ',',
	} {
		if got := sniffComma([]byte(in)); got != want {
			t.Errorf("sniffComma(%q) = %q, want %q", in, got, want)
		}
	}
}

// checkCSVOutput asserts the properties every rewrite must have: the output
// parses as strict RFC 4180, no cell starts a formula, and rewriting it
// again changes nothing.
func checkCSVOutput(t *testing.T, in, out []byte, st csvStats, comma byte) {
	t.Helper()
	if len(st.fixes()) == 0 && !bytes.Equal(in, out) {
		t.Fatalf("no fix reported but output differs:\n in %q\nout %q", in, out)
	}
	// encoding/csv does not skip a byte-order mark; spreadsheets do.
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(out, []byte("\ufeff"))))
	r.Comma = rune(comma)
	r.FieldsPerRecord = -1
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("output is not strict RFC 4180: %v\nout %q", err, out)
		}
		for _, cell := range rec {
			if needsNeutralising([]byte(cell)) {
				t.Fatalf("cell %q survived\nout %q", cell, out)
			}
		}
	}
	var again bytes.Buffer
	st2, err := rewriteCSV(bytes.NewReader(out), &again, comma)
	if err != nil || len(st2.fixes()) != 0 || !bytes.Equal(again.Bytes(), out) {
		t.Fatalf("rewrite is not idempotent: err %v, fixes %v\nout   %q\nagain %q", err, st2.fixes(), out, again.Bytes())
	}
}

func FuzzCSV(f *testing.F) {
	for _, s := range []string{"a,b\n1,2\n", "=1,\"@x\"\r\n-1,-a\r", "\"a\"b,\"c", "\ufeff=1;2\n", "a\t=b\n"} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, which uint8) {
		comma := []byte{',', ';', '\t'}[which%3]
		var out bytes.Buffer
		st, err := rewriteCSV(bytes.NewReader(in), &out, comma)
		if errors.Is(err, errBinary) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		checkCSVOutput(t, in, out.Bytes(), st, comma)
	})
}
