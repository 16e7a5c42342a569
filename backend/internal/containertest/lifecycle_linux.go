package containertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/watchdog"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// ChildEnv is the environment variable that starts a test binary as a
// second airlock process (see Hold); AIRLOCK_TEST_BUSY=1 makes its
// sandbox spin.
const ChildEnv = "AIRLOCK_TEST_CHILD=hold"

// Hold plays a second airlock process for the lifecycle tests: it creates
// a sandbox on be, starts in it a process that spins on a CPU when
// AIRLOCK_TEST_BUSY is 1 (or sleeps), prints "ready ID" once the process
// runs, and waits to be killed. A test binary's TestMain calls it when
// AIRLOCK_TEST_CHILD is "hold".
func Hold(be sandbox.Backend, img sandbox.Image) {
	ctx := context.Background()
	p, _ := sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(10 * time.Minute)}}.Normalize()
	inst, err := be.Create(ctx, sandbox.Spec{Image: img, Policy: p})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	script := "echo go; exec sleep 600"
	if os.Getenv("AIRLOCK_TEST_BUSY") == "1" {
		script = "echo go; while :; do :; done"
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Println("error", err)
		return
	}
	if _, err := inst.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", script}, Stdout: w}); err != nil {
		fmt.Println("error", err)
		return
	}
	buf := make([]byte, 3)
	if _, err := r.Read(buf); err != nil || string(buf) != "go\n" {
		fmt.Println("error", err, buf)
		return
	}
	fmt.Println("ready", inst.ID())
	select {}
}

// StartHolder runs the test binary as a holder (Hold) and returns it with
// the id of its sandbox; env adds to its environment.
func StartHolder(t *testing.T, env ...string) (*backendtest.Child, string) {
	t.Helper()
	child := backendtest.StartChild(t, append([]string{ChildEnv}, env...)...)
	id, ok := strings.CutPrefix(strings.TrimSpace(child.Line), "ready ")
	if !ok {
		t.Fatalf("holder: %q", child.Line)
	}
	return child, id
}

// DiesWithOwner kills child, an airlock process whose sandbox id spins
// (StartHolder with AIRLOCK_TEST_BUSY=1), with SIGKILL, and checks that
// its sandbox is gone within a few seconds (gone says so), counting the
// CPU time the sandbox's cgroup used after the kill.
func DiesWithOwner(t *testing.T, child *backendtest.Child, id string, cg *cgstat.Group, gone func() bool) {
	t.Helper()
	before := cg.Stats()
	if !before.HasCPU || gone() {
		t.Fatalf("sandbox %s: not running before the kill (cpu counted %v)", id, before.HasCPU)
	}
	child.Kill()
	killed := time.Now()
	atKill, last := cg.Stats().CPUNanos, int64(0)
	for !gone() {
		if s := cg.Stats(); s.HasCPU {
			last = s.CPUNanos
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("sandbox %s still there %v after its airlock process was killed", id, time.Since(killed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(killed)
	used := float64(max(last-atKill, 0)) / 1e9
	t.Logf("sandbox gone %v after its airlock process's SIGKILL; it used %.2f CPU seconds meanwhile", took.Round(time.Millisecond), used)
	if used > 5 {
		t.Errorf("the sandbox used %.2f CPU seconds after its owner died", used)
	}
}

// KillWatchdogs kills the watchdogs of airlock process pid, as a crash
// that takes them too would: what is left is for CleanupStale.
func KillWatchdogs(t *testing.T, pid int) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		w, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if bytes.HasPrefix(cmd, []byte(watchdog.Arg0+"\x00")) && len(f) > 1 && string(f[1]) == strconv.Itoa(pid) {
			_ = syscall.Kill(w, syscall.SIGKILL)
			n++
		}
	}
	if n == 0 {
		t.Fatalf("airlock process %d has no watchdog", pid)
	}
}

// PanicEndsSandbox plays a bug that panics in the goroutine following a
// process (inject makes the sandbox's next Result panic): the panic ends
// that sandbox alone, destroyed, with an error wrapping ErrDied that
// says so, and the process's Wait reports it; another sandbox of the
// backend runs on.
func PanicEndsSandbox(t *testing.T, be sandbox.Backend, img sandbox.Image, inject func(sandbox.Instance)) {
	ctx := context.Background()
	victim := backendtest.Create(t, be, img, backendtest.Policy(t, nil))
	other := backendtest.Create(t, be, img, backendtest.Policy(t, nil))
	inject(victim)
	_, err := run(t, victim, "echo", "hi")
	if !errors.Is(err, sandbox.ErrDied) || !strings.Contains(err.Error(), "injected") {
		t.Errorf("the process whose follower panicked: %v, want ErrDied with the panic", err)
	}
	select {
	case <-victim.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox did not end after the panic")
	}
	if !errors.Is(victim.Err(), sandbox.ErrDied) {
		t.Errorf("Err after the panic: %v, want ErrDied", victim.Err())
	}
	if _, err := victim.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"true"}}); err == nil {
		t.Errorf("Start after the panic succeeded")
	}
	if res, err := run(t, other, "echo", "alive"); err != nil || res.Stdout != "alive\n" {
		t.Errorf("another sandbox after the panic: %q %v", res.Stdout, err)
	}
}
