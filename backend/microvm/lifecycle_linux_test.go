package microvm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/microvm"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// childMode lets the test binary play a second airlock process.
func childMode() bool {
	if os.Getenv("AIRLOCK_TEST_CHILD") != "hold" {
		return false
	}
	be := microvm.New(microvm.Options{KernelDir: os.Getenv("AIRLOCK_TEST_KERNELS"), CacheDir: os.Getenv("AIRLOCK_TEST_CACHE"), Accel: os.Getenv("AIRLOCK_TEST_ACCEL")})
	p, _ := sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(10 * time.Minute)}}.Normalize()
	img := sandbox.Image{Name: "python", RootFS: os.Getenv("AIRLOCK_TEST_ROOTFS"), Digest: os.Getenv("AIRLOCK_TEST_DIGEST")}
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: img, Policy: p})
	if err != nil {
		fmt.Println("error", err)
		return true
	}
	if _, err := inst.Start(context.Background(), sandbox.ProcessSpec{Cmd: []string{"sleep", "600"}}); err != nil {
		fmt.Println("error", err)
		return true
	}
	fmt.Println("ready")
	select {}
}

// cacheFiles lists the cache folder's files, which machines share.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestDestroyLeavesNothing: after Destroy no QEMU process, cgroup,
// socket or disk file of the machine is left, and the cache holds only
// what it held before (the shared boot files).
func TestDestroyLeavesNothing(t *testing.T) {
	be, img := newBackend(t)
	cache := cacheDir(t)
	inst := backendtest.CreateWithin(t, 5*time.Minute, be, img, backendtest.Policy(t, nil))
	before := cacheFiles(t, cache)
	res := backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "echo x > /tmp/f; sleep 300 &"}})
	if res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	if left := leftovers(); len(left) == 0 {
		t.Fatal("no QEMU process while the sandbox runs: the check cannot see them")
	}
	if err := inst.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	default:
		t.Error("Done not closed after Destroy")
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("left behind after destroy: %v", left)
	}
	if after := cacheFiles(t, cache); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("the cache changed: %v, was %v", after, before)
	}
	for _, fd := range openSockets(t) {
		t.Errorf("a socket is still open: %s", fd)
	}
}

// openSockets lists this process's open sockets.
func openSockets(t *testing.T) []string {
	t.Helper()
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:") {
			out = append(out, e.Name()+" -> "+l)
		}
	}
	return out
}

// TestSupervisorKilled: when the airlock process dies by SIGKILL, its
// machines die with it, and a later backend removes what they left.
func TestSupervisorKilled(t *testing.T) {
	be, img := newBackend(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_CHILD=hold", "AIRLOCK_TEST_KERNELS="+testimage.Kernels(t), "AIRLOCK_TEST_CACHE="+cacheDir(t),
		"AIRLOCK_TEST_ROOTFS="+img.RootFS, "AIRLOCK_TEST_DIGEST="+img.Digest, "AIRLOCK_TEST_ACCEL="+accel())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
	}()
	select {
	case l := <-line:
		if l != "ready" {
			t.Fatalf("child: %q", l)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("the child's sandbox never became ready")
	}
	held := microvm.Leftovers(cmd.Process.Pid)
	if len(held) == 0 {
		t.Fatal("the child's machine is not visible")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && hasQEMU(microvm.Leftovers(cmd.Process.Pid)) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := microvm.Leftovers(cmd.Process.Pid); hasQEMU(left) {
		t.Fatalf("QEMU outlived its killed airlock: %v", left)
	}
	removed := be.CleanupStale(context.Background())
	if left := microvm.Leftovers(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("after CleanupStale (removed %v), left: %v", removed, left)
	}
	t.Logf("held %v; CleanupStale removed %v", held, removed)
}

func hasQEMU(left []string) bool {
	for _, l := range left {
		if strings.HasPrefix(l, "qemu process") {
			return true
		}
	}
	return false
}

// TestWedgedGuestIsKilled: a guest that stops answering (here, QEMU
// stopped with SIGSTOP) past a process's timeout is killed as a whole,
// and the sandbox reports that it died.
func TestWedgedGuestIsKilled(t *testing.T) {
	_, img := newBackend(t)
	be := microvm.New(microvm.Options{KernelDir: testimage.Kernels(t), CacheDir: cacheDir(t), Accel: accel(), WedgeGrace: 3 * time.Second})
	inst := backendtest.CreateWithin(t, 5*time.Minute, be, img, backendtest.Policy(t, nil))
	// the timeout leaves time to stop QEMU first on a loaded host
	p, err := inst.Start(context.Background(), sandbox.ProcessSpec{Cmd: []string{"sleep", "600"}, Timeout: sandbox.Duration(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range qemuPIDs(t) {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.Wait(ctx)
	if !errors.Is(err, sandbox.ErrDied) {
		t.Fatalf("Wait on a wedged guest: %+v %v, want ErrDied", res, err)
	}
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox of a wedged guest is not done")
	}
	if !errors.Is(inst.Err(), sandbox.ErrDied) {
		t.Errorf("Err: %v, want ErrDied", inst.Err())
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("a killed wedged machine left %v", left)
	}
}
