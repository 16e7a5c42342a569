package hostdir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestDirLifecycle(t *testing.T) {
	testenv.Require(t, "root, to mount the tmpfs", testenv.Root())
	base := t.TempDir()
	d, err := Create(Options{Base: base, ID: "test1", UID: 1000, GID: 1000, DiskBytes: 1 << 20, DiskInodes: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Remove()
	mounts, err := mountsBeneath(d.Path())
	if err != nil || len(mounts) != 2 {
		t.Fatalf("mounts beneath %s: %v %v, want scratch and input", d.Path(), mounts, err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, d.Path()) && !(strings.Contains(line, "nosuid") && strings.Contains(line, "nodev") && strings.Contains(line, "noexec")) {
			t.Errorf("mount without nosuid, nodev, noexec: %s", line)
		}
	}
	for _, b := range d.Binds() {
		st, err := os.Stat(b.Source)
		if err != nil {
			t.Fatal(err)
		}
		uid := st.Sys().(*syscall.Stat_t).Uid
		if b.ReadOnly != (uid == 0) {
			t.Errorf("%s: owner %d; read-only %v", b.Target, uid, b.ReadOnly)
		}
	}
	// the disk cap holds across the writable folders
	big := make([]byte, 700<<10)
	if err := os.WriteFile(filepath.Join(d.Binds()[0].Source, "a"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Binds()[2].Source, "b"), big, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("second 700 KiB under a 1 MiB cap: %v, want ENOSPC", err)
	}
	ctx := context.Background()
	if err := d.PutInput(ctx, "in.csv", strings.NewReader("a,b\n")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(d.Binds()[3].Source, "in.csv")); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("input file: %v %v, want mode 0444", st, err)
	}
	if err := d.PutInput(ctx, "in.csv", strings.NewReader("again")); err == nil {
		t.Errorf("PutInput over an existing file succeeded")
	}
	for _, bad := range []string{"", ".", "..", "a/b", "x\x00", "x\ny"} {
		if err := d.PutInput(ctx, bad, strings.NewReader("x")); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("PutInput(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	f, err := d.OpenOutput()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountsBeneath(d.Path()); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(d.Path()); !os.IsNotExist(err) {
		t.Errorf("folder left: %v", err)
	}
}

func TestStale(t *testing.T) {
	base := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%d-1-gone", cmd.Process.Pid)
	live := Owner() + "-here"
	other := "not-ours"
	for _, n := range []string{dead, live, other} {
		if err := os.Mkdir(filepath.Join(base, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	removed := Stale(base, func(dir, id string) { seen = append(seen, id) })
	if len(removed) != 1 || removed[0] != filepath.Join(base, dead) || len(seen) != 1 || seen[0] != "gone" {
		t.Errorf("removed %v (ids %v), want only %s", removed, seen, dead)
	}
	for _, n := range []string{live, other} {
		if _, err := os.Stat(filepath.Join(base, n)); err != nil {
			t.Errorf("%s was removed: %v", n, err)
		}
	}
}

func TestCheckID(t *testing.T) {
	for _, ok := range []string{"a", "A1_b.c", NewID()} {
		if err := CheckID(ok); err != nil {
			t.Errorf("CheckID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a-b", "a/b", "../x", strings.Repeat("a", 65)} {
		if err := CheckID(bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("CheckID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}
