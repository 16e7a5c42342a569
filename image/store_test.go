package image

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// putImage writes an image folder by hand, as a finished build leaves it.
func putImage(t *testing.T, s *Store, name string, size int64) {
	t.Helper()
	dir := filepath.Join(s.Dir(), name)
	if err := os.MkdirAll(filepath.Join(dir, rootfsDir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := Manifest{Name: name, Built: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), SizeBytes: size,
		Digest: "sha256:00", Packages: []Package{{"bash", "5.2"}}, Env: map[string]string{"PATH": defaultPath}}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, manifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStoreGetListRemove(t *testing.T) {
	s, err := OpenStore(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	if imgs, err := s.List(); err != nil || len(imgs) != 0 {
		t.Fatalf("a store whose folder does not exist yet: %v %v", imgs, err)
	}
	putImage(t, s, "python", 600<<20)
	putImage(t, s, "bash", 100<<20)
	// Neither a folder without a manifest nor a scratch folder is an image.
	must(t, os.MkdirAll(filepath.Join(s.Dir(), "half", rootfsDir), 0o755))
	must(t, os.MkdirAll(filepath.Join(s.Dir(), ".build-python-1", rootfsDir), 0o755))
	imgs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 || imgs[0].Name != "bash" || imgs[1].Name != "python" {
		t.Fatalf("listed %v", imgs)
	}
	img, err := s.Get("python")
	if err != nil {
		t.Fatal(err)
	}
	if img.RootFS() != filepath.Join(s.Dir(), "python", "rootfs") || img.Manifest.SizeBytes != 600<<20 ||
		img.Manifest.Env["PATH"] != defaultPath {
		t.Fatalf("got %+v", img)
	}
	for name, want := range map[string]error{"half": sandbox.ErrNotFound, "nope": sandbox.ErrNotFound,
		".build-python-1": sandbox.ErrInvalid, "../images/python": sandbox.ErrInvalid} {
		if _, err := s.Get(name); !errors.Is(err, want) {
			t.Errorf("Get(%q): %v, want %v", name, err, want)
		}
	}
	must(t, s.Remove("python"))
	if _, err := s.Get("python"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after Remove: %v", err)
	}
	if err := s.Remove("python"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second Remove: %v", err)
	}
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			t.Errorf("Remove left %s", e.Name())
		}
	}
}

func TestDefaultDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AIRLOCK_HOME": "/srv/al", "XDG_DATA_HOME": "/x", "HOME": "/h"}, "/srv/al/images"},
		{map[string]string{"XDG_DATA_HOME": "/x", "HOME": "/h"}, "/x/airlock/images"},
		{map[string]string{"HOME": "/h"}, "/h/.local/share/airlock/images"},
	} {
		if got, err := DefaultDir(env(tc.env)); err != nil || got != tc.want {
			t.Errorf("%v: %q %v, want %q", tc.env, got, err, tc.want)
		}
	}
	if _, err := DefaultDir(env(nil)); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("no variables: %v", err)
	}
}

// holdLock starts a process that locks path with flock(1) until killed,
// as a live build holds its scratch folder.
func holdLock(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	_, err := exec.LookPath("flock")
	testenv.Require(t, "flock(1) from util-linux", err)
	cmd := exec.Command("flock", "--exclusive", "--no-fork", path, "sleep", "600")
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// flock(1) takes the lock before it starts sleep; wait until it has.
	for i := 0; ; i++ {
		f, err := lockDir(path, true)
		if errors.Is(err, errLocked) {
			return cmd
		}
		must(t, err)
		f.Close()
		if i == 1000 {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCleanLeftoversSparesLiveBuilds(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putImage(t, s, "python", 1)
	dead := filepath.Join(s.Dir(), ".build-python-111")
	live := filepath.Join(s.Dir(), ".build-python-222")
	trash := filepath.Join(s.Dir(), ".trash-bash-333")
	for _, d := range []string{dead, live, trash} {
		must(t, os.MkdirAll(filepath.Join(d, rootfsDir, "usr"), 0o755))
	}
	holder := holdLock(t, live)

	var n int
	must(t, s.withLock(func() (err error) { n, err = s.cleanLeftovers(); return err }))
	if n != 2 {
		t.Errorf("cleaned %d folders, want 2", n)
	}
	for _, d := range []string{dead, trash} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s was not cleaned: %v", filepath.Base(d), err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("the live build's folder was removed: %v", err)
	}
	if _, err := s.Get("python"); err != nil {
		t.Fatalf("cleaning touched a finished image: %v", err)
	}

	// Once its holder dies, as a killed build does, the folder goes too.
	holder.Process.Kill()
	holder.Wait()
	must(t, s.withLock(func() (err error) { n, err = s.cleanLeftovers(); return err }))
	if _, err := os.Stat(live); n != 1 || !os.IsNotExist(err) {
		t.Fatalf("after the holder died: cleaned %d, stat %v", n, err)
	}
}

func TestScratchLockIsExclusive(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var sc *scratch
	must(t, s.withLock(func() (err error) { sc, err = s.newScratch(buildPrefix, "x"); return err }))
	// A second open file description conflicts even in the same process,
	// as another process's would.
	if _, err := lockDir(sc.dir, true); !errors.Is(err, errLocked) {
		t.Fatalf("second lock of a live scratch folder: %v, want errLocked", err)
	}
	must(t, sc.remove())
	if _, err := os.Stat(sc.dir); !os.IsNotExist(err) {
		t.Fatalf("scratch folder after remove: %v", err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 612 << 20: "612.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
