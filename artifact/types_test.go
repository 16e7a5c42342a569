package artifact

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestSniff(t *testing.T) {
	tests := []struct {
		head string
		want kind
	}{
		{"\x7fELF\x02\x01\x01", kindExec},
		{"MZ\x90\x00", kindExec},
		{"\xcf\xfa\xed\xfe", kindExec},
		{"\x00asm\x01", kindExec},
		{"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\x00", kindCFB},
		{"PAR1\x15\x04", kindParquet},
		{"PK\x03\x04\x14\x00", kindZip},
		{"\x89PNG\r\n\x1a\n\x00", kindPNG},
		{"\xff\xd8\xff\xe0", kindJPEG},
		{"GIF89a\x01", kindGIF},
		{"RIFF\x10\x00\x00\x00WEBPVP8 ", kindWebP},
		{"%PDF-1.7\n", kindPDF},
		{"\x1f\x8b\x08", kindArchive},
		{"a,b\n1,2\n", kindText},
		{"{\"a\": 1}", kindText},
		{"\ufeff<!DOCTYPE html><html>", kindHTML},
		{"  <p>hi", kindHTML},
		{"<!-- c --><b>x", kindHTML},
		{"<?xml version=\"1.0\"?>\n<!-- c -->\n<svg xmlns=\"http://www.w3.org/2000/svg\">", kindSVG},
		{"<svg:svg xmlns:svg=\"x\">", kindSVG},
		{"<?xml version=\"1.0\"?><root/>", kindXML},
		{"<10 and more", kindText},
		{"a\x00b", kindBinary},
		{"\xff\xfea\x00", kindBinary},
	}
	for _, tt := range tests {
		if got, mime := sniff([]byte(tt.head)); got != tt.want {
			t.Errorf("sniff(%q) = %v (%s), want %v", tt.head, got, mime, tt.want)
		}
	}
}

func TestCheckTypes(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
	jpeg := "\xff\xd8\xff\xe0\x00\x10JFIF"
	elf := "\x7fELF\x02\x01\x01\x00"
	ole := "\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + strings.Repeat("\x00", 100)
	allowPy := testPolicy()
	allowPy.Extensions = append(allowPy.Extensions, "py")
	tests := []struct {
		name, file, data string
		p                *sandbox.ArtifactPolicy
		want, reason     string
		mime             string
	}{
		{name: "png", file: "a.png", data: png, want: "accepted", mime: "image/png"},
		{name: "jpeg named png", file: "a.png", data: jpeg, want: "accepted", reason: "content is image/jpeg", mime: "image/jpeg"},
		{name: "html named png", file: "a.png", data: "<html><script>x</script>", want: "rejected", reason: "content is text/html"},
		{name: "svg named png", file: "a.png", data: "<svg onload=x>", want: "rejected", reason: "content is image/svg+xml"},
		{name: "text named pdf", file: "a.pdf", data: "hello", want: "rejected", reason: "not a .pdf"},
		{name: "elf named csv", file: "a.csv", data: elf, want: "rejected", reason: "program"},
		{name: "elf named txt", file: "a.txt", data: elf, want: "rejected", reason: "program"},
		{name: "pe named xlsx", file: "a.xlsx", data: "MZ\x90\x00", want: "rejected", reason: "program"},
		{name: "ole2 named xlsx", file: "a.xlsx", data: ole, want: "rejected", reason: "OLE2"},
		{name: "ole2 named doc on allowlist", file: "a.doc", data: ole, p: &sandbox.ArtifactPolicy{Extensions: []string{"doc"}}, want: "rejected", reason: "OLE2"},
		{name: "zip named csv", file: "a.csv", data: "PK\x03\x04", want: "rejected", reason: "binary"},
		{name: "html named csv", file: "a.csv", data: "<b>x</b>,1", want: "rejected", reason: "markup"},
		{name: "csv", file: "a.csv", data: "a,=1\n", want: "sanitized", reason: "1 formula cells", mime: "text/csv"},
		{name: "tsv", file: "a.TSV", data: "a\t@x\n", want: "sanitized", reason: "1 formula cells", mime: "text/tab-separated-values"},
		{name: "semicolon csv", file: "a.csv", data: "a;b;c\n1;=2;3\n", want: "sanitized", reason: "1 formula cells"},
		{name: "json", file: "a.json", data: `{"a": "=1"}`, want: "accepted", mime: "application/json"},
		{name: "binary later in text", file: "a.txt", data: strings.Repeat("x", 5000) + "\x00", want: "rejected", reason: "binary data"},
		{name: "html in txt", file: "a.txt", data: "<p onclick=x>hi</p>", want: "sanitized", reason: "content is text/html", mime: "text/html"},
		{name: "markdown with html", file: "r.md", data: "<p align=center onmouseover=x>t</p>\n# T\n", want: "sanitized", reason: "event handlers", mime: "text/markdown"},
		{name: "markdown plain", file: "r.md", data: "# T\n\nif a<b and c>d then\n", want: "accepted", mime: "text/markdown"},
		{name: "markdown cut tag", file: "r.md", data: "# T\n\nif a<b then\n", want: "sanitized", reason: "escaped as text", mime: "text/markdown"},
		{name: "svg", file: "p.svg", data: `<svg xmlns="http://www.w3.org/2000/svg" onload="x"><rect/></svg>`, want: "sanitized", reason: "event handlers", mime: "image/svg+xml"},
		{name: "html", file: "r.html", data: `<html><body><h1>x</h1></body></html>`, want: "accepted", mime: "text/html"},
		{name: "xml", file: "d.xml", data: `<?xml version="1.0"?><r><a>1</a></r>`, want: "accepted", mime: "application/xml"},
		{name: "no extension", file: "Makefile", data: "all:", want: "rejected", reason: "no extension"},
		{name: "exe", file: "a.exe", data: "MZ", want: "rejected", reason: "not on the allowlist"},
		{name: "double extension", file: "a.csv.sh", data: "x", want: "rejected", reason: ".sh is not on the allowlist"},
		{name: "allowlisted script", file: "a.py", data: "#!/usr/bin/env python3\nprint(1)\n", p: &allowPy, want: "accepted"},
		{name: "bad name", file: "a\x01.csv", data: "x", want: "rejected", reason: "control character"},
		{name: "active content reject", file: "a.html", data: "<script>x</script>", p: &sandbox.ArtifactPolicy{ActiveContent: ActiveReject}, want: "rejected", reason: "active content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy()
			if tt.p != nil {
				p = *tt.p
			}
			a := checkBytes(t, tt.file, []byte(tt.data), p)
			if a.Verdict != tt.want || !strings.Contains(a.Reason, tt.reason) {
				t.Fatalf("got %s (%s), want %s with %q", a.Verdict, a.Reason, tt.want, tt.reason)
			}
			if tt.mime != "" && a.MIME != tt.mime {
				t.Errorf("mime = %q, want %q", a.MIME, tt.mime)
			}
			if (a.MIME == "text/html" || a.MIME == "image/svg+xml") && a.Verdict != "rejected" && a.ServeHint != ServeHint {
				t.Errorf("markup without serve hint")
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	p := Normalize(sandbox.ArtifactPolicy{Extensions: []string{".CSV", " png", "csv", ""}, ActiveContent: "strip", MaxFiles: -1})
	if strings.Join(p.Extensions, ",") != "csv,png" {
		t.Errorf("extensions = %v", p.Extensions)
	}
	if p.ActiveContent != ActiveReject || p.MaxFiles != DefaultMaxFiles || p.MaxArchiveRatio != DefaultMaxArchiveRatio {
		t.Errorf("normalized = %+v", p)
	}
	if d := Normalize(sandbox.ArtifactPolicy{}); len(d.Extensions) != len(DefaultExtensions) || d.ActiveContent != ActiveSanitize {
		t.Errorf("defaults = %+v", d)
	}
}

func TestCheckCaps(t *testing.T) {
	p := testPolicy()
	p.MaxFileBytes = 10
	out := &memOutput{}
	a, err := Check(t.Context(), "a.txt", strings.NewReader(strings.Repeat("x", 11)), 5, out, p)
	if err != nil || a.Verdict != "rejected" || !strings.Contains(a.Reason, "grew past the cap of 10") {
		t.Fatalf("growing file: %+v %v", a, err)
	}
	a, err = Check(t.Context(), "a.txt", strings.NewReader(""), 1<<40, out, p)
	if err != nil || a.Verdict != "rejected" || !strings.Contains(a.Reason, "over the cap") {
		t.Fatalf("huge file: %+v %v", a, err)
	}
}
