//go:build linux

package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// conformance checks that the backend runs commands as the contract says.
func (s *suite) conformance(t *testing.T) {
	t.Run("stdout stderr and exit codes", s.testExitCodes)
	t.Run("stdin", s.testStdin)
	t.Run("environment", s.testEnv)
	t.Run("identity and folders", s.testIdentity)
	t.Run("inputs", s.testInputs)
	t.Run("files", s.testFiles)
	t.Run("processes", s.testProcesses)
	t.Run("quick processes", s.testQuickProcesses)
	t.Run("outputs", s.testOutputs)
	t.Run("state between commands", s.testState)
	t.Run("concurrent commands", s.testConcurrent)
	t.Run("threads", s.testThreads)
	t.Run("streaming", s.testStreaming)
	t.Run("timeout", s.testTimeout)
	t.Run("stdout cap", s.testStdoutCap)
	t.Run("memory cap", s.testMemory)
	t.Run("pids cap", s.testPids)
	t.Run("cpu quota", s.testCPU)
	t.Run("open files cap", s.testOpenFiles)
	t.Run("usage", s.testUsage)
	t.Run("bad requests", s.testBadRequests)
	t.Run("destroy", s.testDestroy)
}

func (s *suite) testExitCodes(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	res := sh(t, inst, "echo out; echo err >&2; exit 3")
	if res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || res.Signal != "" {
		t.Errorf("got stdout %q stderr %q exit %d signal %q", res.Stdout, res.Stderr, res.ExitCode, res.Signal)
	}
	if res.ID != inst.ID() || res.Backend != s.Backend.Name() {
		t.Errorf("result names sandbox %q backend %q, want %q %q", res.ID, res.Backend, inst.ID(), s.Backend.Name())
	}
	res = sh(t, inst, "kill -TERM $$")
	if res.ExitCode != 143 || res.Signal != "SIGTERM" {
		t.Errorf("killed by SIGTERM: exit %d signal %q, want 143 SIGTERM", res.ExitCode, res.Signal)
	}
	res = Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"no-such-program-xyz"}})
	if res.ExitCode != 127 || !strings.Contains(res.Stderr, "not found") {
		t.Errorf("missing program: exit %d stderr %q, want 127 and 'not found'", res.ExitCode, res.Stderr)
	}
	res = Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"/etc/passwd"}})
	if res.ExitCode != 126 {
		t.Errorf("not executable: exit %d stderr %q, want 126", res.ExitCode, res.Stderr)
	}
}

func (s *suite) testStdin(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"cat"}, Stdin: strings.NewReader("hello stdin")})
	if res.Stdout != "hello stdin" {
		t.Errorf("stdin echoed as %q", res.Stdout)
	}
	res = Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"cat"}})
	if res.Stdout != "" || res.ExitCode != 0 {
		t.Errorf("no stdin: got %q exit %d, want empty and 0", res.Stdout, res.ExitCode)
	}
}

func (s *suite) testEnv(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_HOST_SECRET", "must-not-leak")
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Env = map[string]string{"FROM_POLICY": "p", "BOTH": "policy"} }))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"env"}, Env: map[string]string{"FROM_REQUEST": "r", "BOTH": "request"}})
	got := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	sort.Strings(got)
	// the defaults, then the image's own environment, then the policy's
	// and the request's
	env := map[string]string{"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"}
	for k, v := range s.Image.Env {
		env[k] = v
	}
	env["FROM_POLICY"], env["FROM_REQUEST"], env["BOTH"] = "p", "r", "request"
	var want []string
	for k, v := range env {
		want = append(want, k+"="+v)
	}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("environment inside:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func (s *suite) testIdentity(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	res := sh(t, inst, `echo "$(id -u):$(id -g) $(pwd) $HOME $(hostname)"`)
	if res.Stdout != "1000:1000 /workspace /tmp airlock\n" {
		t.Errorf("identity: %q (stderr %q), want 1000:1000 /workspace /tmp airlock", res.Stdout, res.Stderr)
	}
}

func (s *suite) testInputs(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	ctx := context.Background()
	data := "a,b\n1,2\n"
	if err := putInput(ctx, inst, "data.csv", strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "big.bin")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := os.WriteFile(f, big, 0o600); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := putInput(ctx, inst, "big.bin", fh); err != nil {
		t.Fatal(err)
	}
	res := sh(t, inst, "cat /workspace/input/data.csv; wc -c < /workspace/input/big.bin; echo x > /workspace/input/data.csv || echo refused; rm -f /workspace/input/big.bin || echo refused")
	want := data + fmt.Sprintln(len(big)) + "refused\nrefused\n"
	if res.Stdout != want {
		t.Errorf("inputs inside:\n%q\nwant\n%q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	for _, bad := range []string{"", ".", "..", "../x", "/etc/x", "x\x00y", "x\ny"} {
		if err := putInput(ctx, inst, bad, strings.NewReader("x")); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("put input %q = %v, want ErrInvalid", bad, err)
		}
	}
	// the input cap holds for the files together
	small := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.InputBytes = 2 << 20 }))
	if err := putInput(ctx, small, "one.bin", io.LimitReader(zeros{}, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := putInput(ctx, small, "two.bin", io.LimitReader(zeros{}, 3<<20/2)); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("inputs past the input cap: %v, want ErrLimit", err)
	}
	// an input put again replaces the old one; the code still cannot
	if err := putInput(ctx, inst, "data.csv", strings.NewReader("again")); err != nil {
		t.Fatal(err)
	}
	if err := putInput(ctx, inst, "sub/nested.txt", strings.NewReader("deep")); err != nil {
		t.Fatal(err)
	}
	res = sh(t, inst, "cat /workspace/input/data.csv; echo; cat /workspace/input/sub/nested.txt; echo; touch /workspace/input/sub/x 2>/dev/null || echo refused")
	if res.Stdout != "again\ndeep\nrefused\n" {
		t.Errorf("replaced and nested inputs inside: %q (stderr %q)", res.Stdout, res.Stderr)
	}
}

// testFiles drives Files: every operation, the caps, and the links the
// code plants to lead them astray.
func (s *suite) testFiles(t *testing.T) {
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.DiskBytes = 8 << 20 }))
	ctx := context.Background()
	fs := inst.Files()
	if _, err := fs.Put(ctx, "/tmp/a/b/c.txt", strings.NewReader("hello"), 0); err != nil {
		t.Fatal(err)
	}
	res := sh(t, inst, "cat /tmp/a/b/c.txt; echo; stat -c '%u %a' /tmp/a/b/c.txt; echo more >> /tmp/a/b/c.txt && echo appended")
	if res.Stdout != "hello\n1000 644\nappended\n" {
		t.Errorf("a put file inside: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	r, info, err := fs.Get(ctx, "/tmp/a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "hellomore\n" || info.Size != int64(len(got)) {
		t.Errorf("get: %q, info %+v", got, info)
	}
	sh(t, inst, "mkdir -p /workspace/output/d && echo x > /workspace/output/d/one && echo yy > /workspace/output/d/two && ln -s /etc /tmp/etclink && ln -s /etc/passwd /workspace/output/pw")
	list, err := fs.List(ctx, "/workspace/output/d")
	if err != nil || len(list) != 2 || list[0].Name != "one" || list[1].Name != "two" || list[1].Size != 3 {
		t.Errorf("list: %+v %v", list, err)
	}
	if st, err := fs.Stat(ctx, "/workspace/output/pw"); err != nil || st.Mode&os.ModeSymlink == 0 || st.Target != "/etc/passwd" {
		t.Errorf("stat of a link: %+v %v", st, err)
	}
	// links the code planted are never followed, on the way or at the end
	for _, p := range []string{"/tmp/etclink/passwd", "/workspace/output/pw"} {
		if r, _, err := fs.Get(ctx, p); !errors.Is(err, sandbox.ErrInvalid) {
			if r != nil {
				r.Close()
			}
			t.Errorf("get %s through a planted link: %v, want ErrInvalid", p, err)
		}
	}
	if _, err := fs.Put(ctx, "/tmp/etclink/evil", strings.NewReader("x"), 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("put through a planted link: %v, want ErrInvalid", err)
	}
	for _, p := range []string{"/etc/passwd", "/workspace", "/tmp/../etc/x", "relative", "/proc/self/environ"} {
		if _, err := fs.Put(ctx, p, strings.NewReader("x"), 0); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("put %q: %v, want ErrInvalid", p, err)
		}
	}
	if _, _, err := fs.Get(ctx, "/tmp/missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("get of a missing file: %v, want ErrNotFound", err)
	}
	// caps: one put's own cap, and the disk cap of the folder
	if _, err := fs.Put(ctx, "/tmp/capped", strings.NewReader(strings.Repeat("x", 1000)), 100); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("put over its cap: %v, want ErrLimit", err)
	}
	if _, err := fs.Put(ctx, "/tmp/huge", io.LimitReader(zeros{}, 16<<20), 0); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("put over the disk cap: %v, want ErrLimit", err)
	}
	if _, err := fs.Stat(ctx, "/tmp/huge"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a failed put left a file behind: %v", err)
	}
	if err := fs.Mkdir(ctx, "/workspace/output/made/deep"); err != nil {
		t.Error(err)
	}
	if err := fs.Rename(ctx, "/workspace/output/d/one", "/workspace/output/made/deep/one"); err != nil {
		t.Error(err)
	}
	if err := fs.Rename(ctx, "/workspace/output/d/two", "/workspace/output/made/deep/one"); !errors.Is(err, sandbox.ErrExist) {
		t.Errorf("rename over an existing file: %v, want ErrExist", err)
	}
	if err := fs.Remove(ctx, "/workspace/output/made"); err != nil {
		t.Error(err)
	}
	if err := fs.Remove(ctx, "/tmp/etclink"); err != nil {
		t.Error(err)
	}
	res = sh(t, inst, "ls /workspace/output; ls /tmp")
	if res.Stdout != "d\npw\na\n" {
		t.Errorf("after mkdir, rename and remove: %q (stderr %q)", res.Stdout, res.Stderr)
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (s *suite) testOutputs(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	res := sh(t, inst, "mkdir -p /workspace/output/sub && echo result > /workspace/output/sub/r.txt")
	if res.ExitCode != 0 {
		t.Fatalf("write output: %d %s", res.ExitCode, res.Stderr)
	}
	if _, ok := inst.(sandbox.OutputDirOpener); !ok {
		// a backend without a host folder hands out a tar stream
		dst := t.TempDir()
		arts, err := collectOutput(context.Background(), inst, dst, artifact.Normalize(sandbox.ArtifactPolicy{}))
		b, rerr := os.ReadFile(filepath.Join(dst, "sub", "r.txt"))
		if err != nil || rerr != nil || string(b) != "result\n" {
			t.Errorf("output through the archive: %q, %v %v (artifacts %+v)", b, err, rerr, arts)
		}
		return
	}
	dir, err := openOutput(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	b, err := readBeneath(dir, "sub/r.txt")
	if err != nil || string(b) != "result\n" {
		t.Errorf("output read back as %q, %v", b, err)
	}
}

func (s *suite) testState(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	sh(t, inst, "echo kept > /tmp/state")
	if res := sh(t, inst, "cat /tmp/state"); res.Stdout != "kept\n" {
		t.Errorf("second command read %q, want the first one's file", res.Stdout)
	}
}

func (s *suite) testConcurrent(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	var wg sync.WaitGroup
	results := make([]sandbox.Result, 4)
	for k := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", fmt.Sprintf("sleep 0.3; echo %d", k)}})
			if err != nil {
				t.Errorf("concurrent exec %d: %v", k, err)
			}
			results[k] = res
		}()
	}
	wg.Wait()
	for k, res := range results {
		if res.Stdout != fmt.Sprintf("%d\n", k) || res.ExitCode != 0 {
			t.Errorf("command %d: stdout %q exit %d", k, res.Stdout, res.ExitCode)
		}
	}
}

// testThreads runs multithreaded programs: Python threads, and node's
// thread pool where the image has node. libc makes threads with clone3
// and falls back to clone only when clone3 fails with ENOSYS, so a filter
// that answers EPERM breaks every thread.
func (s *suite) testThreads(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", `
import threading
done = []
ts = [threading.Thread(target=done.append, args=(k,)) for k in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print(len(done))`}})
	if res.Stdout != "8\n" {
		t.Errorf("8 python threads: %q %q", res.Stdout, res.Stderr)
	}
	res = sh(t, inst, `command -v node >/dev/null || { echo "no node"; exit 0; }; node -e 'require("fs").readFile("/etc/hostname", (e, d) => console.log(e ? e.code : "read"))'`)
	if res.Stdout != "read\n" && res.Stdout != "no node\n" {
		t.Errorf("node with its thread pool: %q %q", res.Stdout, res.Stderr)
	}
	t.Logf("node: %s", strings.TrimSpace(res.Stdout))
}

// lockedBuffer is a bytes.Buffer safe for the streaming goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (s *suite) testStreaming(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	var out, errb lockedBuffer
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "for i in 1 2 3; do echo $i; echo e$i >&2; done"}, Stdout: &out, Stderr: &errb})
	if out.String() != "1\n2\n3\n" || errb.String() != "e1\ne2\ne3\n" || res.Stdout != out.String() {
		t.Errorf("streamed stdout %q stderr %q, result %q", out.String(), errb.String(), res.Stdout)
	}
}

func (s *suite) testTimeout(t *testing.T) {
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.Timeout = sandbox.Duration(time.Second) }))
	start := time.Now()
	res := sh(t, inst, "echo started; sleep 60")
	if !res.TimedOut || res.ExitCode != sandbox.ExitTimeout || res.Stdout != "started\n" {
		t.Errorf("sleep past the timeout: timed_out %v exit %d stdout %q", res.TimedOut, res.ExitCode, res.Stdout)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("timeout of 1s took %v to fire", d)
	}
	// a request's own timeout overrides the policy's
	res = Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sleep", "2"}, Timeout: sandbox.Duration(10 * time.Second)})
	if res.TimedOut || res.ExitCode != 0 {
		t.Errorf("request timeout 10s over policy 1s: timed_out %v exit %d", res.TimedOut, res.ExitCode)
	}
	// stdin that never ends does not hold the command past its timeout
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	res = Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"cat"}, Stdin: r})
	if !res.TimedOut || res.ExitCode != sandbox.ExitTimeout {
		t.Errorf("block on stdin: timed_out %v exit %d", res.TimedOut, res.ExitCode)
	}
}

func (s *suite) testStdoutCap(t *testing.T) {
	const limit = 64 << 10
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.OutputBytes = limit }))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
		"import sys\nsys.stdout.write('o'*(1<<20)); sys.stderr.write('e'*(1<<20)); sys.stdout.flush(); print('done', file=sys.stderr)"}})
	if len(res.Stdout) != limit || !res.StdoutTruncated || len(res.Stderr) != limit || !res.StderrTruncated {
		t.Errorf("1MiB each with a 64KiB cap: stdout %d truncated %v, stderr %d truncated %v",
			len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated)
	}
	if res.ExitCode != 0 {
		t.Errorf("the writer must not be broken by the cap: exit %d", res.ExitCode)
	}
	res = sh(t, inst, "echo small")
	if res.StdoutTruncated || res.Stdout != "small\n" {
		t.Errorf("small output: %q truncated %v", res.Stdout, res.StdoutTruncated)
	}
}

func (s *suite) testMemory(t *testing.T) {
	s.skip(t, "memory cap")
	const limit = 64 << 20
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.MemoryBytes = limit }))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
		"x = bytearray(128 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')"}})
	if !res.OOMKilled || res.ExitCode != sandbox.ExitOOM || strings.Contains(res.Stdout, "survived") {
		t.Errorf("twice the memory cap: oom_killed %v exit %d stdout %q stderr %q", res.OOMKilled, res.ExitCode, res.Stdout, res.Stderr)
	}
	res = Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", "x = bytearray(16 << 20); print('fine')"}})
	if res.OOMKilled || res.Stdout != "fine\n" {
		t.Errorf("a quarter of the cap, after an OOM: oom_killed %v stdout %q stderr %q", res.OOMKilled, res.Stdout, res.Stderr)
	}
}

func (s *suite) testPids(t *testing.T) {
	const limit = 32
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.Pids = limit }))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", `
import os, time
n = 0
try:
    while n < 10000:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print(n, e.errno)
`}})
	// The cap counts every task in the sandbox; a backend may add to it a
	// documented reserve for its own helpers (Config.PidsReserve).
	var n, errno int
	if _, err := fmt.Sscan(res.Stdout, &n, &errno); err != nil || n+1 > limit+s.PidsReserve || n < limit/2 || errno != 11 {
		t.Errorf("fork until refused with a cap of %d (+%d reserved): %q (stderr %q)", limit, s.PidsReserve, res.Stdout, res.Stderr)
	}
	t.Logf("the command and %d children ran under a cap of %d (+%d reserved for the backend's own tasks)", n, limit, s.PidsReserve)
	if !res.PidsLimitHit && !s.skipped(t, "pids_limit_hit reported") {
		t.Errorf("pids_limit_hit not reported")
	}
}

func (s *suite) testCPU(t *testing.T) {
	s.skip(t, "cpu quota")
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.CPUs = 0.5 }))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", `
import os, time
end = time.time() + 2
kids = [os.fork() for _ in range(2)]
if 0 in kids:
    while time.time() < end: pass
    os._exit(0)
for k in kids: os.waitpid(k, 0)
`}})
	// two busy processes for 2 s would use 4000 ms of CPU unthrottled
	if res.Usage.CPUMillis <= 0 || res.Usage.CPUMillis > 0.5*res.DurationMS*1.3+100 {
		t.Errorf("cpu quota 0.5: used %.0f ms of CPU in %.0f ms", res.Usage.CPUMillis, res.DurationMS)
	}
	t.Logf("two busy loops under a 0.5 CPU quota: %.0f ms CPU in %.0f ms wall", res.Usage.CPUMillis, res.DurationMS)
}

func (s *suite) testOpenFiles(t *testing.T) {
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.OpenFiles = 100 }))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", `
import os, errno
fds = []
try:
    while len(fds) < 100000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print(len(fds), errno.errorcode[e.errno])
`}})
	var n int
	var name string
	if _, err := fmt.Sscan(res.Stdout, &n, &name); err != nil || name != "EMFILE" || n > 100 || n < 90 {
		t.Errorf("open until refused with a cap of 100: %q (stderr %q)", res.Stdout, res.Stderr)
	}
}

func (s *suite) testUsage(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
		"import time\nx = bytearray(64 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"}})
	// 300 ms of the process's own CPU time, however loaded the host is
	if res.Usage.CPUMillis < 300 || res.Usage.PeakMemoryBytes < 64<<20 || res.DurationMS < 300 {
		t.Errorf("usage after 300 ms of CPU with 64 MiB: %+v, duration %.0f ms", res.Usage, res.DurationMS)
	}
}

func (s *suite) testBadRequests(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	ctx := context.Background()
	for _, req := range []sandbox.ProcessSpec{
		{},
		{Cmd: []string{""}},
		{Cmd: []string{"echo", "a\x00b"}},
		{Cmd: []string{"env"}, Env: map[string]string{"A=B": "x"}},
		{Cmd: []string{"pwd"}, Dir: "relative"},
		{Cmd: []string{"true"}, Timeout: -1},
	} {
		if _, err := sandbox.Exec(ctx, inst, req); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Exec(%+v) = %v, want ErrInvalid", req, err)
		}
	}
}

func (s *suite) testDestroy(t *testing.T) {
	p := Policy(t, nil)
	inst, err := s.Backend.Create(context.Background(), sandbox.Spec{Image: s.Image, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := inst.Destroy(context.Background()); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"true"}}); err == nil {
		t.Errorf("Exec after Destroy succeeded")
	}
	if s.Leftovers != nil {
		if left := s.Leftovers(); len(left) > 0 {
			t.Errorf("left behind after destroy: %v", left)
		}
	}
}

// testProcesses drives the process interface: a KeepAlive process and
// what it starts outlive the processes around it, while what an ordinary
// process leaves dies with it; stdin pipes, signals, waits, and the end
// of the sandbox.
func (s *suite) testProcesses(t *testing.T) {
	timeout := s.scaled(2 * time.Second)
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.Timeout = timeout }))
	ctx := context.Background()
	var kaOut testenv.Buffer
	ka, err := inst.Start(ctx, sandbox.ProcessSpec{KeepAlive: true, Stdout: &kaOut,
		Cmd: []string{"sh", "-c", "sleep 300 & echo child $!; trap 'exit 7' TERM; while :; do sleep 0.1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	child := ""
	for deadline := time.Now().Add(30 * time.Second); child == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f := strings.Fields(kaOut.String()); len(f) == 2 {
			child = f[1]
		}
	}
	if child == "" {
		t.Fatalf("the KeepAlive process printed no child pid: %q", kaOut.String())
	}
	// an ordinary process's leftover dies when it ends; the KeepAlive
	// process and its child live on, past the policy's timeout too
	res := sh(t, inst, "sleep 300 & echo $!")
	left := strings.TrimSpace(res.Stdout)
	time.Sleep(time.Duration(timeout) + 500*time.Millisecond)
	res = sh(t, inst, "for p in "+left+" "+child+"; do if [ -d /proc/$p ] && ! grep -q '^State:.Z' /proc/$p/status; then echo alive; else echo gone; fi; done")
	if res.Stdout != "gone\nalive\n" {
		t.Errorf("after an ordinary process ended: its leftover and the KeepAlive child are %q, want gone and alive", res.Stdout)
	}
	if err := ka.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kres, err := ka.Wait(wctx)
	if err != nil || kres.ExitCode != 7 || kres.TimedOut {
		t.Errorf("the KeepAlive process after SIGTERM: %+v %v, want exit 7", kres, err)
	}
	if again, err := ka.Wait(wctx); err != nil || again.ExitCode != kres.ExitCode {
		t.Errorf("a second Wait: %+v %v", again, err)
	}
	res = sh(t, inst, "[ -d /proc/"+child+" ] && echo alive || echo gone")
	if res.Stdout != "gone\n" {
		t.Errorf("the KeepAlive process's child after it ended: %q, want gone", res.Stdout)
	}
	// a stdin pipe, written while the process runs
	p, err := inst.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"cat"}, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(p.Stdin(), "ping\n"); err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	if res, err := p.Wait(wctx); err != nil || res.Stdout != "ping\n" {
		t.Errorf("cat with an open stdin: %+v %v", res, err)
	}
	// Wait's context bounds the wait only
	p, err = inst.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"sleep", "1"}})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := p.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past its context: %v", err)
	}
	cancelShort()
	if res, err := p.Wait(wctx); err != nil || res.ExitCode != 0 {
		t.Errorf("sleep 1 after a short Wait: %+v %v", res, err)
	}
	select {
	case <-inst.Done():
		t.Fatalf("Done closed while the sandbox runs: %v", inst.Err())
	default:
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Destroy")
	}
	if !errors.Is(inst.Err(), sandbox.ErrDestroyed) {
		t.Errorf("Err after Destroy: %v, want ErrDestroyed", inst.Err())
	}
	if _, err := inst.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("Start after Destroy: %v, want ErrDestroyed", err)
	}
}

// testQuickProcesses runs many short processes back to back, and some at
// once: each ends before what started it has finished starting, so every
// sweep races the start of the process it sweeps. The sandbox must stay up
// and every process must report its own exit.
func (s *suite) testQuickProcesses(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	n := 200
	if s.Backend.Name() != "native" {
		n = 40 // each process of a container backend is a runtime exec
	}
	for k := range n {
		res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", fmt.Sprintf("exit %d", k%7)}})
		if res.ExitCode != k%7 {
			t.Fatalf("process %d: exit %d, want %d (stderr %q)", k, res.ExitCode, k%7, res.Stderr)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n / 8 {
				res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"true"}})
				if err != nil || res.ExitCode != 0 {
					errs <- fmt.Errorf("worker %d: exit %d: %v", k, res.ExitCode, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case <-inst.Done():
		t.Fatalf("the sandbox ended: %v", inst.Err())
	default:
	}
}
