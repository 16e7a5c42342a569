package docker_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"
)

// childMode lets the test binary play a second airlock process that
// holds a sandbox (containertest.Hold) on the runtime AIRLOCK_TEST_RUNTIME
// names.
func childMode() bool {
	if os.Getenv("AIRLOCK_TEST_CHILD") != "hold" {
		return false
	}
	img, err := testimage.Resolve()
	if err != nil {
		fmt.Println("error", err)
		return true
	}
	containertest.Hold(docker.New(docker.Options{Runtime: os.Getenv("AIRLOCK_TEST_RUNTIME")}), img)
	return true
}

// backend returns a docker backend on runtime, closed at the end of the
// test, or skips the test where the daemon cannot give the runtime's full
// form.
func backend(t *testing.T, runtimeName string) *docker.Backend {
	t.Helper()
	be := docker.New(docker.Options{Runtime: runtimeName})
	t.Cleanup(func() { be.Close() })
	requireFull(t, be, runtimeName)
	return be
}

func TestMemoryEndsSandboxRunsc(t *testing.T) {
	containertest.MemoryEndsSandbox(t, backend(t, docker.RuntimeRunsc), dataImage(t))
}

// TestOOMScoreAdj checks with an unbuffered write that a command cannot
// lower its OOM score below 1000. Only a process with CAP_SYS_RESOURCE
// can set that floor, so the test needs it.
func TestOOMScoreAdj(t *testing.T) {
	if !hasCap(t, unix.CAP_SYS_RESOURCE) {
		t.Skip("this process lacks CAP_SYS_RESOURCE, so neither it nor the daemon it started can make 1000 a floor for commands' OOM scores")
	}
	be := backend(t, docker.RuntimeRunc)
	p, _ := sandbox.Policy{}.Normalize()
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: dataImage(t), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", `
import errno, os
fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
try:
    os.write(fd, b"1")
    print("written")
except OSError as e:
    print(errno.errorcode[e.errno])
print(open("/proc/self/oom_score_adj").read().strip())
`}})
	if err != nil || res.Stdout != "EACCES\n1000\n" {
		t.Errorf("lowering oom_score_adj: %q %q %v, want EACCES and 1000", res.Stdout, res.Stderr, err)
	}
}

// TestStaleCleanup kills an airlock process that holds a sandbox, and
// its watchdog: the container and folder stay, and the next Backend
// removes them, but not the sandboxes of live processes.
func TestStaleCleanup(t *testing.T) {
	be := backend(t, docker.RuntimeRunc)
	p, _ := sandbox.Policy{}.Normalize()
	mine, err := be.Create(context.Background(), sandbox.Spec{Image: dataImage(t), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Destroy(context.Background())
	child, id := containertest.StartHolder(t, "AIRLOCK_TEST_RUNTIME="+docker.RuntimeRunc)
	containertest.KillWatchdogs(t, child.Pid)
	child.Kill()
	if n := containersOf(t, id); n != 1 {
		t.Fatalf("the dead process's sandbox %s has %d containers; want 1 to clean", id, n)
	}
	fresh := docker.New(docker.Options{})
	defer fresh.Close()
	removed := fresh.CleanupStale(context.Background())
	if len(removed) != 2 || !strings.HasPrefix(removed[0], "container ") || !strings.HasSuffix(removed[1], "-"+id) {
		t.Errorf("removed %v, want the container and folder of sandbox %s only", removed, id)
	}
	if n := containersOf(t, id); n != 0 {
		t.Errorf("the dead process's container is still there")
	}
	if res, err := sandbox.Exec(context.Background(), mine, sandbox.ProcessSpec{Cmd: []string{"echo", "alive"}}); err != nil || res.Stdout != "alive\n" {
		t.Errorf("a live process's sandbox after the cleanup: %q %v", res.Stdout, err)
	}
}

// TestDiesWithOwner kills an airlock process with SIGKILL while its
// sandbox spins: the watchdog removes the container and folder within
// seconds, on either runtime.
func TestDiesWithOwner(t *testing.T) {
	for _, rt := range []string{docker.RuntimeRunc, docker.RuntimeRunsc} {
		t.Run(rt, func(t *testing.T) {
			backend(t, rt)
			child, id := containertest.StartHolder(t, "AIRLOCK_TEST_RUNTIME="+rt, "AIRLOCK_TEST_BUSY=1")
			cg, err := cgstat.ForPID(containerPid(t, id))
			if err != nil {
				t.Fatal(err)
			}
			folder := filepath.Join(stateDir, child.Owner+"-"+id)
			containertest.DiesWithOwner(t, child, id, cg, func() bool {
				_, err := os.Stat(folder)
				return containersOf(t, id) == 0 && os.IsNotExist(err)
			})
		})
	}
}

// containerPid is the host pid of the pid 1 of a sandbox's container.
func containerPid(t *testing.T, id string) int {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, err := cli.ContainerInspect(context.Background(), "airlock-"+id)
	if err != nil || st.State == nil || st.State.Pid == 0 {
		t.Fatalf("container of sandbox %s: %v", id, err)
	}
	return st.State.Pid
}

// containersOf counts the containers labelled with a sandbox id.
func containersOf(t *testing.T, id string) int {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "airlock.sandbox="+id))})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// TestFolderImage runs a folder as the image: a tiny root made of the
// host's shell and a few coreutils, imported once and reused.
func TestFolderImage(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testenv.Require(t, "an x86_64 host (the tiny root copies its library paths)", fmt.Errorf("this is %s", runtime.GOARCH))
	}
	be := backend(t, docker.RuntimeRunc)
	root, err := image.Resolve(nil, tinyRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := sandbox.Policy{}.Normalize()
	for round := range 2 {
		inst, err := be.Create(context.Background(), sandbox.Spec{Image: root, Policy: p})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"echo", "from a folder"}})
		if err != nil || res.Stdout != "from a folder\n" || res.ExitCode != 0 {
			t.Errorf("round %d: %q %q %d %v", round, res.Stdout, res.Stderr, res.ExitCode, err)
		}
		if err := inst.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// tinyRoot copies the host's dash, env, sleep, echo and their libraries
// into a new root folder.
func tinyRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"usr/bin/sh": "/bin/dash", "usr/bin/env": "/usr/bin/env", "usr/bin/sleep": "/usr/bin/sleep",
		"usr/bin/echo": "/usr/bin/echo", "usr/lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
		"usr/lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
	}
	for dst, src := range files {
		copyFile(t, src, filepath.Join(root, dst))
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}} {
		if err := os.Symlink(l[1], filepath.Join(root, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "proc", "dev", "sys", "etc", "workspace/input", "workspace/output"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		testenv.Require(t, "the host's "+src+" for the tiny root", err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

// dataImage is the built python image, or skips t (fails it under CI).
func dataImage(t *testing.T) sandbox.Image {
	t.Helper()
	img, err := testimage.Resolve()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
	return img
}

// hasCap tells whether this process has a capability in its effective set.
func hasCap(t *testing.T, c int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<c) != 0
		}
	}
	return false
}
