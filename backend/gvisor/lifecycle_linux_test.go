package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/gvisor"
	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// childMode lets the test binary play a second airlock process that
// holds a sandbox of the host image (containertest.Hold).
func childMode() bool {
	if os.Getenv("AIRLOCK_TEST_CHILD") != "hold" {
		return false
	}
	containertest.Hold(gvisor.New(gvisor.Options{Runsc: os.Getenv("AIRLOCK_TEST_RUNSC")}), sandbox.HostImage())
	return true
}

func TestMemoryEndsSandbox(t *testing.T) {
	containertest.MemoryEndsSandbox(t, newBackend(t), sandbox.HostImage())
}

// sandboxProcesses lists the host pids serving one sandbox: the sentry
// and the gofer, whose command lines name its runsc state folder.
func sandboxProcesses(owner, id string) []string {
	arg := "--root=" + filepath.Join(stateDir, owner+"-"+id, "runsc")
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), arg+"\x00") {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestOOMScoreAdj checks that the processes serving a sandbox are the
// host's first OOM victims: oom_score_adj inside gVisor is the sentry's
// own number.
func TestOOMScoreAdj(t *testing.T) {
	be := newBackend(t)
	p, _ := sandbox.Policy{}.Normalize()
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	pids := sandboxProcesses(hostdir.Owner(), inst.ID())
	if len(pids) < 2 {
		t.Fatalf("sentry and gofer not found: %v", pids)
	}
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "oom_score_adj"))
		if err != nil || strings.TrimSpace(string(b)) != "1000" {
			t.Errorf("process %s serving the sandbox: oom_score_adj %q %v, want 1000", pid, b, err)
		}
	}
}

// TestStaleCleanup kills an airlock process that holds a sandbox, and its
// watchdog: the sandbox outlives them, and the next Backend deletes it
// and its folder, but not the sandboxes of live processes.
func TestStaleCleanup(t *testing.T) {
	be := newBackend(t)
	p, _ := sandbox.Policy{}.Normalize()
	mine, err := be.Create(context.Background(), sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Destroy(context.Background())
	child, id := containertest.StartHolder(t, "AIRLOCK_TEST_RUNSC="+containertest.Runsc(t))
	owner := child.Owner
	containertest.KillWatchdogs(t, child.Pid)
	child.Kill()
	if len(sandboxProcesses(owner, id)) == 0 {
		t.Fatalf("the dead process's sandbox %s is not running; nothing to clean", id)
	}
	removed := gvisor.New(gvisor.Options{Runsc: containertest.Runsc(t)}).CleanupStale(context.Background())
	want := filepath.Join(stateDir, owner+"-"+id)
	if len(removed) != 1 || removed[0] != want {
		t.Errorf("removed %v, want only %s", removed, want)
	}
	for deadline := time.Now().Add(5 * time.Second); len(sandboxProcesses(owner, id)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the dead process's sandbox still runs: %v", sandboxProcesses(owner, id))
		}
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Errorf("its folder is still there: %v", err)
	}
	if res, err := sandbox.Exec(context.Background(), mine, sandbox.ProcessSpec{Cmd: []string{"echo", "alive"}}); err != nil || res.Stdout != "alive\n" {
		t.Errorf("a live process's sandbox after the cleanup: %q %v", res.Stdout, err)
	}
}

// TestDiesWithOwner kills an airlock process with SIGKILL while its
// sandbox spins: the watchdog deletes the sandbox and its folder within
// seconds.
func TestDiesWithOwner(t *testing.T) {
	newBackend(t)
	child, id := containertest.StartHolder(t, "AIRLOCK_TEST_RUNSC="+containertest.Runsc(t), "AIRLOCK_TEST_BUSY=1")
	folder := filepath.Join(stateDir, child.Owner+"-"+id)
	b, err := os.ReadFile(filepath.Join(folder, "sandbox.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgstat.ForPID(pid)
	if err != nil {
		t.Fatal(err)
	}
	containertest.DiesWithOwner(t, child, id, cg, func() bool {
		_, err := os.Stat(folder)
		return len(sandboxProcesses(child.Owner, id)) == 0 && os.IsNotExist(err)
	})
}

// TestImageFolderUntouched runs a sandbox on an image folder and checks
// that the folder's first two levels are as they were: runsc creates the
// mount points a root lacks (the image's /dev has no shm), and those
// belong in the sandbox's own layer, not in an image that others share.
func TestImageFolderUntouched(t *testing.T) {
	folder := testimage.Folder(t)
	before := topEntries(t, folder)
	be := newBackend(t)
	img, err := image.Resolve(nil, folder)
	if err != nil {
		t.Fatal(err)
	}
	inst := backendtest.Create(t, be, img, backendtest.Policy(t, nil))
	res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "ls -d /dev/shm /workspace/output && touch /dev/shm/x"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run on the image folder: %v %q %q", err, res.Stdout, res.Stderr)
	}
	if err := inst.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := topEntries(t, folder)
	added := slices.DeleteFunc(slices.Clone(after), func(p string) bool { return slices.Contains(before, p) })
	removed := slices.DeleteFunc(slices.Clone(before), func(p string) bool { return slices.Contains(after, p) })
	if len(added)+len(removed) > 0 {
		t.Errorf("the image folder changed: added %v, removed %v", added, removed)
	}
}

// topEntries lists the paths at depth one and two below root.
func topEntries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if depth := strings.Count(rel, "/"); rel != "." && depth <= 1 {
			out = append(out, rel)
		} else if rel != "." && d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
