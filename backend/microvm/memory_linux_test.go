package microvm_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestFreedMemoryGoesBack: memory a guest process filled and freed leaves
// the QEMU process's resident set again (the balloon's free page
// reporting), instead of staying the host's cost for as long as the
// machine lives.
func TestFreedMemoryGoesBack(t *testing.T) {
	be, img := newBackend(t)
	inst := backendtest.CreateWithin(t, 5*time.Minute, be, img, backendtest.Policy(t, nil))
	backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"/bin/true"}})
	pid := qemuPID(t)
	idle := rssMiB(t, pid)

	// 300 MiB written (not merely mapped), held a few seconds, freed at exit
	const fill = 300
	// peak is the watcher's alone until watched is closed
	var peak float64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if r, err := readRSS(pid); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	code := fmt.Sprintf("import time\nx = bytes(range(256)) * (%d << 12)\nprint(len(x) >> 20)\ntime.sleep(4)\n", fill)
	res := backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", code}, Timeout: sandbox.Duration(5 * time.Minute)})
	close(stop)
	<-watched
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != strconv.Itoa(fill) {
		t.Fatalf("the filling process: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if peak < idle+fill*0.8 {
		t.Fatalf("QEMU's RSS went from %.0f MiB idle to a peak of %.0f MiB only while the guest held %d MiB: the fill did not reach the host", idle, peak, fill)
	}
	// given back within a minute or two: the guest reports free 2 MiB
	// blocks a couple of seconds after they are freed, slower under TCG
	deadline := time.Now().Add(2 * time.Minute)
	for {
		now := rssMiB(t, pid)
		if now <= peak-fill*0.6 {
			t.Logf("QEMU RSS: %.0f MiB idle, %.0f MiB while %d MiB were held, %.0f MiB after they were freed", idle, peak, fill, now)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("QEMU RSS: %.0f MiB idle, %.0f MiB while %d MiB were held, still %.0f MiB two minutes after they were freed", idle, peak, fill, now)
		}
		time.Sleep(time.Second)
	}
}

// qemuPID is the pid of this process's one QEMU machine.
func qemuPID(t *testing.T) int {
	t.Helper()
	pids := qemuPIDs(t)
	if len(pids) != 1 {
		t.Fatalf("QEMU machines of this process: %v, want one", pids)
	}
	return pids[0]
}

// qemuPIDs lists the pids of this process's QEMU machines.
func qemuPIDs(t *testing.T) []int {
	t.Helper()
	var pids []int
	for _, l := range leftovers() {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "qemu" {
			pid, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatalf("leftover %q: %v", l, err)
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// rssMiB is pid's resident set in MiB, or a failure.
func rssMiB(t *testing.T, pid int) float64 {
	t.Helper()
	r, err := readRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readRSS reads VmRSS from /proc/PID/status, in MiB.
func readRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
