package hostdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestDirLifecycle(t *testing.T) {
	testenv.Require(t, "root, to mount the tmpfs", testenv.Root())
	base := t.TempDir()
	d, err := Create(Options{Base: base, ID: "test1", UID: 1000, GID: 1000, DiskBytes: 1 << 20, DiskInodes: 64, InputBytes: 4096})
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
	fs := d.Files()
	if _, err := fs.Put(ctx, "/workspace/input/in.csv", strings.NewReader("a,b\n"), 0); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(d.Binds()[3].Source, "in.csv"))
	if err != nil || st.Mode().Perm() != 0o444 || st.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("input file: %v %v, want mode 0444 owned by 1000", st, err)
	}
	if _, err := fs.Put(ctx, "/workspace/input/big", strings.NewReader(strings.Repeat("x", 5000)), 0); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("an input over the input cap: %v, want ErrLimit", err)
	}
	for _, bad := range []string{"", "/etc/passwd", "/workspace/input/../x", "/tmp/x\x00"} {
		if _, err := fs.Put(ctx, bad, strings.NewReader("x"), 0); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Put(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	f, err := d.OpenOutputDir()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(ctx, "/tmp"); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("Files after Remove: %v, want ErrDestroyed", err)
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

// TestZombieOwner checks that a zombie owner counts as dead: a killed
// airlock process whose parent has not reaped it holds nothing.
func TestZombieOwner(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	owner := OwnerOf(cmd.Process.Pid)
	if !OwnerAlive(owner) {
		t.Fatalf("a live process %s counts as dead", owner)
	}
	_ = cmd.Process.Kill()
	for deadline := time.Now().Add(5 * time.Second); OwnerAlive(owner); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a killed, unreaped process %s still counts as alive", owner)
		}
	}
	_ = cmd.Wait()
	if OwnerAlive(owner) {
		t.Errorf("a reaped process %s counts as alive", owner)
	}
}

// TestFIFOs passes bytes both ways through one process's FIFOs and checks
// that their names are gone once the process opened them.
func TestFIFOs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting the tmpfs needs root")
	}
	d, err := Create(Options{Base: t.TempDir(), ID: "fifo", UID: 1000, GID: 1000, DiskBytes: 1 << 20, DiskInodes: 64, IO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Remove()
	f, err := d.MakeFIFOs(true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer f.Stdout.Close()
	defer f.Stderr.Close()
	host := func(p string) string { return filepath.Join(d.io(), filepath.Base(p)) }
	cmd := exec.Command("sh", "-c", `exec <"$1" >"$2" 2>"$3"; kill -STOP $$; tr a-z A-Z; echo done >&2`, "sh", host(f.Paths[0]), host(f.Paths[1]), host(f.Paths[2]))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if strings.Contains(string(b), ") T ") {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.Opened(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(d.io()); len(ents) != 0 {
		t.Errorf("fifo names left after Opened: %v", ents)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_, _ = f.Stdin.Write([]byte("hello"))
	f.Stdin.Close()
	out, _ := io.ReadAll(f.Stdout)
	errb, _ := io.ReadAll(f.Stderr)
	_ = cmd.Wait()
	if string(out) != "HELLO" || string(errb) != "done\n" {
		t.Errorf("through the fifos: stdout %q stderr %q", out, errb)
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
