package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"golang.org/x/sys/unix"
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

// TestSumDoesNotDependOnReaders: a tree of many files, some hard-linked,
// gives one digest, size and count whether its files are read one or many
// at a time.
func TestSumDoesNotDependOnReaders(t *testing.T) {
	root := makeTree(t)
	for i := range 300 {
		dir := filepath.Join(root, "d"+strconv.Itoa(i%7))
		must(t, os.MkdirAll(dir, 0o755))
		name := filepath.Join(dir, "f"+strconv.Itoa(i))
		must(t, os.WriteFile(name, bytes.Repeat([]byte{byte(i)}, i*37), 0o644))
		if i%10 == 0 {
			must(t, os.Link(name, filepath.Join(dir, "h"+strconv.Itoa(i))))
		}
	}
	one, err := sum(context.Background(), root, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, readers := range []int{2, sumReaders, 64} {
		got, err := sum(context.Background(), root, readers)
		if err != nil {
			t.Fatal(err)
		}
		if got != one {
			t.Errorf("%d readers: %+v, one reader: %+v", readers, got, one)
		}
	}
}

// BenchmarkSumUncached hashes the python image's root, in AIRLOCK_HOME's
// store, with the page cache dropped before each run: one file read at a
// time (the baseline) and sumReaders at a time.
func BenchmarkSumUncached(b *testing.B) {
	root := filepath.Join(os.Getenv("AIRLOCK_HOME"), "images", "python", "rootfs")
	_, err := os.Stat(root)
	testenv.Require(b, "the python image (set AIRLOCK_HOME to the folder 'bash .ci/lib/image.sh' prints)", err)
	testenv.Require(b, "root, to drop the page cache", testenv.Root())
	dropCache := func() {
		unix.Sync()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
			b.Fatalf("dropping the page cache: %v", err)
		}
	}
	for _, readers := range []int{1, sumReaders} {
		b.Run("readers-"+strconv.Itoa(readers), func(b *testing.B) {
			testenv.Median(b, func() error {
				_, err := sum(context.Background(), root, readers)
				return err
			}, dropCache)
		})
	}
}
