package artifact

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// tarOf writes entries into a tar stream.
func tarOf(t *testing.T, entries ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = h.Linkname // the tests carry the content here
			h.Linkname = ""
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func file(name, body string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeReg, Linkname: body}
}

func TestCollectTarRules(t *testing.T) {
	stream := tarOf(t,
		&tar.Header{Name: "./", Typeflag: tar.TypeDir},
		file("report.txt", "fine\n"),
		&tar.Header{Name: "sub/", Typeflag: tar.TypeDir},
		file("sub/data.csv", "a,b\n=1+1,2\n"),
		&tar.Header{Name: "link.txt", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		&tar.Header{Name: "hard.txt", Typeflag: tar.TypeLink, Linkname: "report.txt"},
		&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1},
		&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo},
		file("../escape.txt", "x"),
		file("/abs.txt", "x"),
		file("sub/../dup.txt", "x"),
		file("report.txt", "twice"),
		file(".env", "SECRET=1"),
		file("tool.exe", "MZ"),
	)
	arts, err := CollectTar(context.Background(), stream, Destination{}, sandbox.ArtifactPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"report.txt":     sandbox.VerdictAccepted,
		"sub/data.csv":   sandbox.VerdictSanitized,
		"link.txt":       sandbox.VerdictRejected,
		"hard.txt":       sandbox.VerdictRejected,
		"dev":            sandbox.VerdictRejected,
		"fifo":           sandbox.VerdictRejected,
		"../escape.txt":  sandbox.VerdictRejected,
		"/abs.txt":       sandbox.VerdictRejected,
		"sub/../dup.txt": sandbox.VerdictRejected,
		".env":           sandbox.VerdictRejected,
		"tool.exe":       sandbox.VerdictRejected,
	}
	got := map[string]string{}
	twice := 0
	for _, a := range arts {
		if a.Path == "report.txt" && a.Verdict == sandbox.VerdictRejected {
			twice++
			continue
		}
		got[a.Path] = a.Verdict
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: %q, want %q (all: %+v)", name, got[name], v, arts)
		}
	}
	if twice != 1 {
		t.Errorf("a name given twice: %d rejections, want 1", twice)
	}
}

// TestCollectTarPAX: what a writer says in airlock's PAX records (a
// regular file of more than one link, a socket written as a FIFO) is
// refused with its own reason; a file of one link passes.
func TestCollectTarPAX(t *testing.T) {
	linked := file("linked.txt", "x")
	linked.PAXRecords = map[string]string{sandbox.PAXLinks: "2"}
	single := file("single.txt", "x")
	single.PAXRecords = map[string]string{sandbox.PAXLinks: "1"}
	sock := &tar.Header{Name: "sock", Typeflag: tar.TypeFifo, PAXRecords: map[string]string{sandbox.PAXType: "socket"}}
	arts, err := CollectTar(context.Background(), tarOf(t, linked, single, sock), Destination{}, sandbox.ArtifactPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"linked.txt": "hard link", "single.txt": "", "sock": "socket"}
	for _, a := range arts {
		why, ok := want[a.Path]
		if !ok {
			t.Errorf("unexpected entry %+v", a)
			continue
		}
		delete(want, a.Path)
		if why == "" && a.Verdict != sandbox.VerdictAccepted || why != "" && (a.Verdict != sandbox.VerdictRejected || !strings.Contains(a.Reason, why)) {
			t.Errorf("%s: %s %q, want %q", a.Path, a.Verdict, a.Reason, why)
		}
	}
	if len(want) > 0 {
		t.Errorf("no verdict for %v", want)
	}
}

// TestCollectTarCaps: sizes in the headers are checked before anything is
// read, so a giant (sparse) entry costs nothing; a truncated stream ends
// the walk with a rejection.
func TestCollectTarCaps(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644})
	_, _ = tw.Write(make([]byte, 1024)) // the rest is missing: the stream is cut
	arts, err := CollectTar(context.Background(), bytes.NewReader(b.Bytes()), Destination{}, sandbox.ArtifactPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	// sorted by path: the cut stream (".") first, then the giant
	if len(arts) != 2 || arts[1].Path != "big.bin" || arts[1].Verdict != sandbox.VerdictRejected || !strings.Contains(arts[1].Reason, "over the cap") ||
		arts[0].Verdict != sandbox.VerdictRejected || !strings.Contains(arts[0].Reason, "malformed") {
		t.Errorf("a giant entry in a cut stream: %+v", arts)
	}
	arts, err = CollectTar(context.Background(), strings.NewReader("not a tar stream at all, not even close................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................"), Destination{}, sandbox.ArtifactPolicy{})
	if err != nil || len(arts) != 1 || arts[0].Verdict != sandbox.VerdictRejected || !strings.Contains(arts[0].Reason, "malformed") {
		t.Errorf("garbage: %+v %v", arts, err)
	}
}

// rawHeader is a ustar header block made by hand, for the entries Go's
// tar writer will not write; edit, if set, fills in more fields before
// the checksum.
func rawHeader(name string, typ byte, size int64, edit func(h []byte)) []byte {
	h := make([]byte, 512)
	copy(h, name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:], fmt.Sprintf("%011o\x00", size))
	copy(h[136:], "00000000000\x00")
	h[156] = typ
	copy(h[257:], "ustar  \x00")
	if edit != nil {
		edit(h)
	}
	copy(h[148:], "        ")
	sum := 0
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// paxRecord is one "LEN KEY=VALUE\n" record, LEN counting itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for {
		r := fmt.Sprintf("%d %s=%s\n", n, k, v)
		if len(r) == n {
			return r
		}
		n = len(r)
	}
}

// sparseStreams are tar streams of one file, big.csv, of realSize bytes
// that are all a hole, so no data follows the headers: in GNU's form (type
// 'S') and in PAX's (GNU.sparse records before a regular file).
func sparseStreams(realSize int64) map[string][]byte {
	end := make([]byte, 1024)
	gnu := rawHeader("big.csv", tar.TypeGNUSparse, 0, func(h []byte) {
		copy(h[386:], fmt.Sprintf("%011o\x00", realSize)) // one map entry: 0 bytes at the end
		copy(h[398:], "00000000000\x00")
		copy(h[483:], fmt.Sprintf("%011o\x00", realSize))
	})
	recs := paxRecord("GNU.sparse.numblocks", "1") + paxRecord("GNU.sparse.map", fmt.Sprintf("%d,0", realSize)) +
		paxRecord("GNU.sparse.size", strconv.FormatInt(realSize, 10))
	pax := rawHeader("PaxHeaders/big.csv", tar.TypeXHeader, int64(len(recs)), nil)
	pax = append(pax, recs...)
	pax = append(pax, make([]byte, 512-len(recs)%512)...)
	pax = append(pax, rawHeader("big.csv", tar.TypeReg, 0, nil)...)
	return map[string][]byte{"GNU": append(gnu, end...), "PAX": append(pax, end...)}
}

// TestCollectTarRefusesSparse: a sparse entry, which the tar reader turns
// into 200 MiB of zeros out of 2 KiB of stream, is refused before a byte
// of it is read, in either form.
func TestCollectTarRefusesSparse(t *testing.T) {
	for form, stream := range sparseStreams(200 << 20) {
		tr := tar.NewReader(bytes.NewReader(stream))
		if h, err := tr.Next(); err != nil || h.Size != 200<<20 {
			t.Fatalf("%s: the hand-made sparse entry does not read as one: %+v %v", form, h, err)
		}
		dst := filepath.Join(t.TempDir(), "out")
		arts, err := CollectTar(context.Background(), bytes.NewReader(stream), Destination{Dir: dst}, sandbox.ArtifactPolicy{})
		if err != nil {
			t.Fatal(err)
		}
		if len(arts) != 1 || arts[0].Verdict != sandbox.VerdictRejected || !strings.Contains(arts[0].Reason, "sparse") {
			t.Errorf("%s sparse entry: %+v", form, arts)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("%s: the sparse entry landed: %v", form, ents)
		}
	}
}

// TestCollectTarSameAsFolder: the same files judged from a folder and from
// a tar stream get the same verdicts and land the same way.
func TestCollectTarSameAsFolder(t *testing.T) {
	files := map[string]string{
		"a.txt":          "plain\n",
		"b.csv":          "x,y\n@SUM(A1),2\n-3.5,+4\n",
		"page.html":      "<p onclick=\"x()\">hi</p><script>alert(1)</script>",
		"deep/er/c.json": `{"k": [1, 2]}`,
	}
	src := t.TempDir()
	var hs []*tar.Header
	for name, body := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, file(name, body))
	}
	dir, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	fromDir, err := CollectTo(context.Background(), dir, Destination{Dir: t.TempDir()}, sandbox.ArtifactPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	fromTar, err := CollectTar(context.Background(), tarOf(t, hs...), Destination{Dir: dst}, sandbox.ArtifactPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fromDir) != len(fromTar) {
		t.Fatalf("folder: %+v\ntar: %+v", fromDir, fromTar)
	}
	for k := range fromDir {
		d, a := fromDir[k], fromTar[k]
		if d.Path != a.Path || d.Verdict != a.Verdict || d.SHA256 != a.SHA256 || d.Reason != a.Reason {
			t.Errorf("folder %+v\ntar    %+v", d, a)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "b.csv")); err != nil || !strings.Contains(string(b), "'@SUM") {
		t.Errorf("the tar's CSV landed as %q %v", b, err)
	}
}

// FuzzCollectTar feeds arbitrary streams: no panic, and nothing lands
// outside the destination.
func FuzzCollectTar(f *testing.F) {
	f.Add([]byte{})
	var seed bytes.Buffer
	tw := tar.NewWriter(&seed)
	_ = tw.WriteHeader(&tar.Header{Name: "a.csv", Typeflag: tar.TypeReg, Size: 6, Mode: 0o644})
	_, _ = tw.Write([]byte("=1,2\n\n"))
	_ = tw.WriteHeader(&tar.Header{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644})
	_ = tw.Close()
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "out")
		if _, err := CollectTar(context.Background(), bytes.NewReader(data), Destination{Dir: dst}, sandbox.ArtifactPolicy{}); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 || ents[0].Name() != "out" {
			t.Fatalf("something landed beside the destination: %v", ents)
		}
	})
}
