package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// makeTree builds a small root file system: a folder, a file, a link and
// a hard link.
func makeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("airlock\n"), 0o644))
	must(t, os.Symlink("etc/hostname", filepath.Join(root, "name")))
	must(t, os.Link(filepath.Join(root, "etc", "hostname"), filepath.Join(root, "etc", "hostname2")))
	must(t, os.Chmod(root, 0o755))
	return root
}

func TestSumFollowsTheDocumentedRecords(t *testing.T) {
	root := makeTree(t)
	got, err := Sum(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	content := sha256.Sum256([]byte("airlock\n"))
	hexContent := hex.EncodeToString(content[:])
	h := sha256.New()
	for _, rec := range []string{
		fmt.Sprintf("/\x00d\x000755\x00%d\x00%d\x000\x00\x00\n", uid, gid),
		fmt.Sprintf("/etc\x00d\x000755\x00%d\x00%d\x000\x00\x00\n", uid, gid),
		fmt.Sprintf("/etc/hostname\x00f\x000644\x00%d\x00%d\x008\x00%s\x00\n", uid, gid, hexContent),
		fmt.Sprintf("/etc/hostname2\x00f\x000644\x00%d\x00%d\x008\x00%s\x00\n", uid, gid, hexContent),
		fmt.Sprintf("/name\x00l\x000777\x00%d\x00%d\x0012\x00\x00etc/hostname\n", uid, gid),
	} {
		h.Write([]byte(rec))
	}
	want := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got.Digest != want {
		t.Fatalf("digest %s, want %s", got.Digest, want)
	}
	// The hard-linked file counts once: 8 bytes of content, 12 of link target.
	if got.Files != 5 || got.SizeBytes != 8+12 {
		t.Fatalf("files %d size %d, want 5 and 20", got.Files, got.SizeBytes)
	}
}

func TestSumIgnoresTimesAndSeesEveryChange(t *testing.T) {
	ctx := context.Background()
	a, b := makeTree(t), makeTree(t)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(b, "etc", "hostname"), old, old))
	base := sumOf(t, a)
	if sumOf(t, b) != base {
		t.Fatal("trees differing only in times have different digests")
	}
	changes := map[string]func(root string){
		"content": func(r string) {
			must(t, os.WriteFile(filepath.Join(r, "etc", "hostname2"), []byte("airlocK\n"), 0o644))
		},
		"mode": func(r string) { must(t, os.Chmod(filepath.Join(r, "etc", "hostname"), 0o600)) },
		"target": func(r string) {
			must(t, os.Remove(filepath.Join(r, "name")))
			must(t, os.Symlink("etc/hostname2", filepath.Join(r, "name")))
		},
		"rename":  func(r string) { must(t, os.Rename(filepath.Join(r, "name"), filepath.Join(r, "nam3"))) },
		"new dir": func(r string) { must(t, os.Mkdir(filepath.Join(r, "tmp"), 0o755)) },
		"sticky":  func(r string) { must(t, os.Chmod(filepath.Join(r, "etc"), 0o755|os.ModeSticky)) },
	}
	if os.Geteuid() == 0 {
		changes["owner"] = func(r string) { must(t, os.Lchown(filepath.Join(r, "etc", "hostname"), 1000, 1000)) }
	}
	for name, change := range changes {
		c := makeTree(t)
		change(c)
		if sumOf(t, c) == base {
			t.Errorf("%s change left the digest unchanged", name)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Sum(cancelled, a); err == nil {
		t.Error("Sum ignored a cancelled context")
	}
}

func sumOf(t *testing.T, root string) string {
	t.Helper()
	s, err := Sum(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	return s.Digest
}
