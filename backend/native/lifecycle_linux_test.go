package native_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// childMode lets the test binary play a second airlock process: the tests
// below start it with AIRLOCK_TEST_CHILD set, and TestMain hands over.
func childMode() (int, bool) {
	switch os.Getenv("AIRLOCK_TEST_CHILD") {
	case "hold":
		holdSandbox(os.Getenv("AIRLOCK_TEST_MARK"))
		return 0, true
	case "rootless":
		waitGo()
		return rootlessChecks(), true
	case "rootless-cgroup":
		waitGo()
		return rootlessCgroupChecks(), true
	}
	return 0, false
}

// waitGo waits for the parent's go-ahead line on stdin.
func waitGo() { _, _ = bufio.NewReader(os.Stdin).ReadString('\n') }

// holdSandbox starts a sandbox running a marked sleep, says so, and waits
// to be killed.
func holdSandbox(mark string) {
	be := native.New(native.Options{})
	p, _ := sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(10 * time.Minute)}}.Normalize()
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	go func() {
		_, _ = sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "sleep 600; : " + mark}})
	}()
	for len(hostProcesses(mark)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	select {}
}

func newMark(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "airlockmark" + hex.EncodeToString(b[:])
}

func hostProcesses(mark string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), mark) && e.Name() != fmt.Sprint(os.Getpid()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestSupervisorKilled kills an airlock process with SIGKILL while its
// sandbox runs: the sandbox must die with it, and the next backend must
// remove the cgroups it left.
func TestSupervisorKilled(t *testing.T) {
	testenv.Require(t, "root, to create cgroups (CI runs as root)", testenv.Root())
	mark := newMark(t)
	child := backendtest.StartChild(t, "AIRLOCK_TEST_CHILD=hold", "AIRLOCK_TEST_MARK="+mark)
	if child.Line != "ready\n" {
		t.Fatalf("child: %q", child.Line)
	}
	if len(hostProcesses(mark)) == 0 {
		t.Fatal("the sandboxed sleep is not running")
	}
	child.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for len(hostProcesses(mark)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := hostProcesses(mark); len(left) > 0 {
		t.Fatalf("sandbox processes outlived their airlock process: %v", left)
	}
	stale := leftoversOf(child.Pid)
	if len(stale) == 0 {
		t.Fatal("expected the killed process's cgroups to be left for cleanup")
	}
	removed := native.New(native.Options{}).CleanupStale(context.Background())
	if left := leftoversOf(child.Pid); len(left) > 0 {
		t.Errorf("after CleanupStale, still left: %v (removed %v)", left, removed)
	}
	t.Logf("killed airlock's sandbox died with it; the next start removed %d cgroups", len(removed))
}

// rootlessResult is one check reported by the rootless child.
type rootlessResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// say reports one check of a child on stdout.
func say(name string, ok bool, detail any) {
	_ = json.NewEncoder(os.Stdout).Encode(rootlessResult{name, ok, fmt.Sprint(detail)})
}

// childSandbox creates the one sandbox of a child's checks and returns a
// function that runs argv plus a script in it; nil when it cannot start
// (said already).
func childSandbox(be *native.Backend, p sandbox.Policy, argv ...string) (sandbox.Instance, func(script string) sandbox.Result) {
	ctx := context.Background()
	p, _ = p.Normalize()
	inst, err := be.Create(ctx, sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
	if err != nil {
		say("create", false, err)
		return nil, nil
	}
	return inst, func(script string) sandbox.Result {
		res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: append(argv, script)})
		if err != nil {
			say("exec "+script, false, err)
		}
		return res
	}
}

// rootlessChecks runs as an unprivileged user and reports on stdout.
func rootlessChecks() int {
	ctx := context.Background()
	be := native.New(native.Options{})
	if err := be.Probe(ctx); err != nil {
		say("probe", false, err)
		return 0
	}
	strict, _ := sandbox.Policy{Strict: true}.Normalize()
	_, err := be.Create(ctx, sandbox.Spec{Image: sandbox.HostImage(), Policy: strict})
	say("strict policy refused without cgroups", errors.Is(err, sandbox.ErrUnsupported), err)
	inst, run := childSandbox(be, sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: 64 << 20, Timeout: sandbox.Duration(3 * time.Second)}}, "sh", "-c")
	if inst == nil {
		return 0
	}
	defer inst.Destroy(ctx)
	res := run(`echo "$(id -u) $(grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t\n' '  ')"`)
	say("runs as 1000 with no capabilities", strings.HasPrefix(res.Stdout, "1000 CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1 Seccomp: 2"), res.Stdout+res.Stderr)
	say("weaker layers reported", strings.Contains(strings.Join(res.Weakened, ";"), "cgroup memory") && strings.Contains(strings.Join(res.Weakened, ";"), "RLIMIT_AS"), res.Weakened)
	res = run(`python3 -c 'x = bytearray(256 << 20)' 2>&1 | tail -1`)
	say("memory fallback stops a large allocation", strings.Contains(res.Stdout, "MemoryError"), res.Stdout)
	res = run("sleep 30")
	say("timeout fires", res.TimedOut && res.ExitCode == sandbox.ExitTimeout, res.ExitCode)
	if _, err := inst.Files().Put(ctx, "/workspace/input/in.txt", strings.NewReader("rootless input\n"), 0); err != nil {
		say("input", false, err)
	} else {
		res = run("cat /workspace/input/in.txt; echo x > /workspace/input/in.txt || echo refused")
		say("input readable, not writable", res.Stdout == "rootless input\nrefused\n", res.Stdout+res.Stderr)
	}
	res = run("echo ok > /workspace/output/o.txt; touch /usr/x 2>&1 | tail -1")
	say("root read-only", strings.Contains(res.Stdout, "Read-only file system"), res.Stdout)
	return 0
}

// TestRootless runs a sandbox as an unprivileged user: it must still run,
// with the layers that need root replaced by rlimits and reported.
func TestRootless(t *testing.T) {
	testenv.Require(t, "root, to switch to an unprivileged user (CI runs as root)", testenv.Root())
	runRootlessChild(t, "rootless", nil, 7)
}

// TestRootlessDelegatedCgroup runs a sandbox as an unprivileged user who
// was given cgroups of its own (as a systemd user slice delegates them):
// the caps then hold for the sandbox as a whole, with no rlimit fallback.
func TestRootlessDelegatedCgroup(t *testing.T) {
	testenv.Require(t, "root, to delegate cgroups to an unprivileged user (CI runs as root)", testenv.Root())
	var dirs []string
	for _, ctl := range []string{"memory", "cpu", "pids", "freezer"} {
		root := "/sys/fs/cgroup/" + ctl
		if _, err := os.Stat(root + "/cgroup.procs"); err != nil {
			testenv.Require(t, "the v1 "+ctl+" hierarchy at "+root, err)
		}
		d := filepath.Join(root, fmt.Sprintf("airlock-rootless-test-%d", os.Getpid()))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
		t.Cleanup(func() {
			if err := os.Remove(d); err != nil {
				t.Errorf("the delegated cgroup %s was left: %v", d, err)
			}
		})
		for _, f := range []string{"", "cgroup.procs", "tasks"} {
			if err := os.Chown(filepath.Join(d, f), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	runRootlessChild(t, "rootless-cgroup", func(pid int) {
		for _, d := range dirs {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}, 4)
}

// runRootlessChild runs this test binary as uid 65534 in child mode mode,
// calls place with its pid before it starts (it waits for a line on its
// stdin), and checks the JSON lines it reports: at least want of them,
// all ok.
func runRootlessChild(t *testing.T, mode string, place func(pid int), want int) {
	t.Helper()
	// t.TempDir's parent is private to root; the child user must reach this one
	dir, err := os.MkdirTemp("", "native-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "native.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		dst.Close()
	}
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = []string{"AIRLOCK_TEST_CHILD=" + mode, "PATH=/usr/bin:/bin", "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if place != nil {
		place(cmd.Process.Pid)
	}
	_, _ = io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rootless child: %v\n%s", err, out.String())
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r rootlessResult
		if json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		n++
		if !r.OK {
			t.Errorf("%s: %s: %s", mode, r.Name, r.Detail)
		} else {
			t.Logf("%s: %s (%s)", mode, r.Name, r.Detail)
		}
	}
	if n < want {
		t.Errorf("%s child reported %d checks, want %d:\n%s", mode, n, want, out.String())
	}
}

// rootlessCgroupChecks runs as an unprivileged user inside cgroups
// delegated to it, and reports on stdout.
func rootlessCgroupChecks() int {
	inst, run := childSandbox(native.New(native.Options{}),
		sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Timeout: sandbox.Duration(30 * time.Second)}}, "python3", "-c")
	if inst == nil {
		return 0
	}
	defer inst.Destroy(context.Background())
	res := run("print('hi')")
	weak := strings.Join(res.Weakened, "; ")
	say("no rlimit fallback for the caps", res.Stdout == "hi\n" && !strings.Contains(weak, "RLIMIT") && !strings.Contains(weak, "cgroup "), weak)
	// four processes of 40 MiB each: RLIMIT_AS (per process) would let
	// them all live; a cap on the sandbox as a whole cannot
	res = run(`
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        x = bytearray(40 << 20)
        for i in range(0, len(x), 4096): x[i] = 1
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
for k in kids: os.waitpid(k, 0)
`)
	say("memory capped for the sandbox as a whole", res.OOMKilled, fmt.Sprintf("oom_killed %v, peak %d", res.OOMKilled, res.Usage.PeakMemoryBytes))
	res = run(`
import os, time
end = time.time() + 2
kids = [os.fork() for _ in range(2)]
if 0 in kids:
    while time.time() < end: pass
    os._exit(0)
for k in kids: os.waitpid(k, 0)
`)
	say("cpu quota holds", res.Usage.CPUMillis > 0 && res.Usage.CPUMillis < 0.5*res.DurationMS*1.3+100,
		fmt.Sprintf("%.0f ms CPU in %.0f ms", res.Usage.CPUMillis, res.DurationMS))
	res = run("print(open('/proc/self/cgroup').read().count('airlock'))")
	say("the sandbox's cgroups are below the delegated ones, hidden inside", res.Stdout == "0\n", res.Stdout)
	return 0
}

// TestPrestart runs sandboxes from a backend that keeps one started
// ahead: each must be a fresh sandbox, and Close must leave nothing.
func TestPrestart(t *testing.T) {
	testenv.Require(t, "root, for the native backend's full form (CI runs as root)", testenv.Root())
	be := native.New(native.Options{Prestart: 1})
	p, _ := sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}.Normalize()
	ctx := context.Background()
	ids := map[string]bool{}
	for k := range 4 {
		inst, err := be.Create(ctx, sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c",
			"ls /tmp | wc -l; echo x > /tmp/mark; cat /proc/self/cgroup | head -1 | wc -c >/dev/null; python3 -c 'x = bytearray(96 << 20)'"}})
		if err != nil {
			t.Fatal(err)
		}
		// a fresh /tmp each time, and the policy's memory cap in force
		if !strings.HasPrefix(res.Stdout, "0\n") || !res.OOMKilled {
			t.Errorf("sandbox %d: stdout %q oom_killed %v (stderr %q)", k, res.Stdout, res.OOMKilled, res.Stderr)
		}
		ids[inst.ID()] = true
		if err := inst.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // let the pool refill
	}
	if len(ids) != 4 {
		t.Errorf("ids %v", ids)
	}
	if left := leftovers(); len(left) == 0 {
		t.Errorf("expected the prestarted sandbox to be waiting")
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("after Close, left behind: %v", left)
	}
}

// TestImageUnderTmp runs an image folder that lies under /tmp, where init
// builds the new root: the image's folders are cloned before anything is
// mounted there, so the root's own tmpfs cannot hide them.
func TestImageUnderTmp(t *testing.T) {
	testenv.Require(t, "root: binds the host's /usr into a folder, which needs root", testenv.Root())
	// a private folder, as mktemp makes them: init could not enter it
	dir, err := os.MkdirTemp("/tmp", "airlock-image-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	usr := filepath.Join(dir, "usr")
	if err := os.Mkdir(usr, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/usr", usr, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(usr, unix.MNT_DETACH)
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	img, err := image.Resolve(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	be := native.New(native.Options{})
	defer be.Close()
	inst := backendtest.Create(t, be, img, backendtest.Policy(t, nil))
	res := backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "echo from the image; ls /"}})
	if !strings.HasPrefix(res.Stdout, "from the image\n") || !strings.Contains(res.Stdout, "usr") {
		t.Errorf("a sandbox of an image under /tmp: %q %q", res.Stdout, res.Stderr)
	}
}
