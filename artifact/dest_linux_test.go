package artifact

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestCollectExistingDestination puts an artifact where the host folder
// already has an entry of its name, of every kind, with and without
// Overwrite: without it the entry stays and the artifact is rejected;
// with it a file or link is replaced and a folder stays. Nothing outside
// the host folder changes.
func TestCollectExistingDestination(t *testing.T) {
	tests := []struct {
		name      string
		existing  string // "", "file", "link", "dangling", "folder"
		overwrite bool
		verdict   string
		reason    string
		after     string // what dst/a.csv holds afterwards: "new", "old", "link", "folder"
	}{
		{"nothing there", "", false, sandbox.VerdictAccepted, "", "new"},
		{"a file", "file", false, sandbox.VerdictRejected, "--overwrite replaces it", "old"},
		{"a link", "link", false, sandbox.VerdictRejected, "already has an entry", "link"},
		{"a dangling link", "dangling", false, sandbox.VerdictRejected, "already has an entry", "link"},
		{"a folder", "folder", false, sandbox.VerdictRejected, "already has an entry", "folder"},
		{"nothing there, overwrite", "", true, sandbox.VerdictAccepted, "", "new"},
		{"a file, overwrite", "file", true, sandbox.VerdictAccepted, "", "new"},
		{"a link, overwrite", "link", true, sandbox.VerdictAccepted, "", "new"},
		{"a dangling link, overwrite", "dangling", true, sandbox.VerdictAccepted, "", "new"},
		{"a folder, overwrite", "folder", true, sandbox.VerdictRejected, "has a folder of this name", "folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			src, dst, outside := filepath.Join(base, "src"), filepath.Join(base, "dst"), filepath.Join(base, "outside.csv")
			mkdirs(t, src, dst)
			writeFile(t, filepath.Join(src, "a.csv"), "new,1\n")
			writeFile(t, outside, "host,0\n")
			target := filepath.Join(dst, "a.csv")
			plantEntry(t, tt.existing, target, outside)
			arts, err := CollectTo(t.Context(), openDir(t, src), Destination{Dir: dst, Overwrite: tt.overwrite}, testPolicy())
			if err != nil {
				t.Fatal(err)
			}
			if len(arts) != 1 || arts[0].Verdict != tt.verdict || !strings.Contains(arts[0].Reason, tt.reason) {
				t.Fatalf("got %+v, want %s with %q", arts, tt.verdict, tt.reason)
			}
			if a := arts[0]; a.Verdict == sandbox.VerdictRejected && (a.SHA256 != "" || a.Size != int64(len("new,1\n"))) {
				t.Errorf("a rejected artifact reports a hash or a size other than its own: %+v", a)
			}
			if got := entryState(t, target); got != tt.after {
				t.Errorf("dst/a.csv is %s afterwards, want %s", got, tt.after)
			}
			if b, _ := os.ReadFile(outside); string(b) != "host,0\n" {
				t.Errorf("the file outside changed: %q", b)
			}
			assertNoPartials(t, dst)
		})
	}
}

// TestDestCommitExisting runs the same cases on both ways of naming a
// file, O_TMPFILE and the hidden temporary name, since Collect picks one
// by file system.
func TestDestCommitExisting(t *testing.T) {
	for _, named := range []bool{false, true} {
		for _, existing := range []string{"", "file", "link", "dangling", "folder"} {
			for _, overwrite := range []bool{false, true} {
				dir := t.TempDir()
				outside := filepath.Join(t.TempDir(), "outside.csv")
				writeFile(t, outside, "host,0\n")
				target := filepath.Join(dir, "a.csv")
				plantEntry(t, existing, target, outside)
				d, err := openDest(dir, overwrite)
				if err != nil {
					t.Fatal(err)
				}
				d.named = named
				s, err := d.create("a.csv")
				if err != nil {
					t.Fatal(err)
				}
				s.f.WriteString("new,1\n")
				why, err := s.commit()
				d.close()
				if err != nil {
					t.Fatalf("named=%v existing=%q overwrite=%v: %v", named, existing, overwrite, err)
				}
				placedWant := existing == "" || overwrite && existing != "folder"
				if (why == "") != placedWant {
					t.Errorf("named=%v existing=%q overwrite=%v: reason %q, want placed %v", named, existing, overwrite, why, placedWant)
				}
				if got := entryState(t, target); placedWant != (got == "new") {
					t.Errorf("named=%v existing=%q overwrite=%v: a.csv is %s", named, existing, overwrite, got)
				}
				if b, _ := os.ReadFile(outside); string(b) != "host,0\n" {
					t.Errorf("named=%v existing=%q overwrite=%v: the file outside changed: %q", named, existing, overwrite, b)
				}
				assertNoPartials(t, dir)
			}
		}
	}
}

// plantEntry makes what a test expects at p: nothing, a file, a link to
// outside, a dangling link or a folder.
func plantEntry(t *testing.T, kind, p, outside string) {
	t.Helper()
	var err error
	switch kind {
	case "file":
		err = os.WriteFile(p, []byte("old,0\n"), 0o644)
	case "link":
		err = os.Symlink(outside, p)
	case "dangling":
		err = os.Symlink(outside+".missing", p)
	case "folder":
		err = os.Mkdir(p, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// entryState says what p is: "new" or "old" for a file by its content,
// "link", "folder", or "missing".
func entryState(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	switch {
	case os.IsNotExist(err):
		return "missing"
	case err != nil:
		t.Fatal(err)
	case fi.Mode()&os.ModeSymlink != 0:
		return "link"
	case fi.IsDir():
		return "folder"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(string(b), "new") {
		return "new"
	}
	return "old"
}

// assertNoPartials fails when a temporary name was left in dir.
func assertNoPartials(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
