package artifact

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlacer: files judged elsewhere land beneath the folder by the rules
// of a Destination: a taken name is kept unless Overwrite, a planted link
// is not followed, and no path leaves the folder.
func TestPlacer(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kept.csv"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPlacer(Destination{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if why, err := p.Place("sub/new.csv", strings.NewReader("new")); why != "" || err != nil {
		t.Fatalf("a new file: %q %v", why, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub/new.csv")); string(b) != "new" {
		t.Errorf("placed %q", b)
	}
	if why, err := p.Place("kept.csv", strings.NewReader("new")); why != reasonExists || err != nil {
		t.Errorf("a taken name: %q %v, want %q", why, err, reasonExists)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kept.csv")); string(b) != "old" {
		t.Errorf("the kept file now holds %q", b)
	}
	if _, err := p.Place("link/x.csv", strings.NewReader("x")); err == nil {
		t.Error("a file beneath a planted link was placed")
	}
	for _, bad := range []string{"../x.csv", "/etc/x", "a/../../x", ""} {
		if _, err := p.Place(bad, strings.NewReader("x")); err == nil {
			t.Errorf("path %q was placed", bad)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("something landed outside the folder: %v", ents)
	}
	o, err := OpenPlacer(Destination{Dir: dir, Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if why, err := o.Place("kept.csv", strings.NewReader("new")); why != "" || err != nil {
		t.Errorf("overwrite: %q %v", why, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kept.csv")); string(b) != "new" {
		t.Errorf("overwritten file holds %q", b)
	}
}
