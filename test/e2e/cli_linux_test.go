package e2e_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// runCLI runs the airlock binary with env added and returns its exit
// status, stdout and stderr.
func runCLI(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestRunClient: with AIRLOCK_URL set, airlock run is a client of the
// server: inputs go up, output streams back, accepted artifacts come down
// into --output, the session is deleted, and the exit statuses are those
// of a local run.
func TestRunClient(t *testing.T) {
	s := startServer(t, serverConfig{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.csv"), []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{client.EnvURL + "=" + s.url, client.EnvKey + "=" + keyA}
	code, stdout, stderr := runCLI(t, dir, env, "run", "--input", "in.csv:data.csv", "--output", "out", "--", "sh", "-c",
		"cat /workspace/input/data.csv; echo oops >&2; echo '=1+1,x' > /workspace/output/r.csv; mkdir /workspace/output/sub; echo ok > /workspace/output/sub/n.txt; printf '\\177ELF' > /workspace/output/t.bin; exit 3")
	if code != 3 || stdout != "a,b\n1,2\n" || !strings.HasPrefix(stderr, "oops\n") {
		t.Errorf("run: exit %d, stdout %q, stderr %q; want 3, the input, oops", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "artifact r.csv: sanitized") || !strings.Contains(stderr, "artifact t.bin: rejected") {
		t.Errorf("stderr does not report the verdicts: %q", stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out/r.csv")); string(b) != "'=1+1,x\n" {
		t.Errorf("out/r.csv: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out/sub/n.txt")); string(b) != "ok\n" {
		t.Errorf("out/sub/n.txt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "out/t.bin")); err == nil {
		t.Error("a rejected artifact reached the output folder")
	}
	// --json, a taken name, and the exit statuses of a timeout and of a
	// kill for memory
	code, stdout, _ = runCLI(t, dir, env, "run", "--json", "--output", "out", "--", "sh", "-c", "echo new > /workspace/output/r.csv")
	var res sandbox.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 0 || len(res.Artifacts) != 1 || res.Artifacts[0].Verdict != sandbox.VerdictRejected {
		t.Errorf("--json with a taken name: exit %d, %+v (%v)", code, res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out/r.csv")); string(b) != "'=1+1,x\n" {
		t.Errorf("a taken name was replaced: %q", b)
	}
	if code, _, _ = runCLI(t, dir, env, "run", "--overwrite", "--output", "out", "--", "sh", "-c", "echo new > /workspace/output/r.csv"); code != 0 {
		t.Errorf("--overwrite: exit %d", code)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out/r.csv")); string(b) != "new\n" {
		t.Errorf("--overwrite did not replace: %q", b)
	}
	if code, _, stderr = runCLI(t, dir, env, "run", "--timeout", "1s", "--", "sleep", "30"); code != sandbox.ExitTimeout || !strings.Contains(stderr, "timed out") {
		t.Errorf("a timeout: exit %d %q, want 124", code, stderr)
	}
	if code, _, _ = runCLI(t, dir, env, "run", "--memory", "32MiB", "--", "python3", "-c", "x = bytearray(256 << 20)"); code != sandbox.ExitOOM {
		t.Errorf("over the memory cap: exit %d, want 137", code)
	}
	if code, stdout, _ = runCLI(t, dir, env, "run", "--stdin", "--", "cat"); code != 0 || stdout != "" {
		t.Errorf("--stdin with none: exit %d %q", code, stdout)
	}
	if code, _, stderr = runCLI(t, dir, append(env, client.EnvKey+"=nobody-key-0123456789abcdef"), "run", "--", "true"); code != sandbox.ExitFailed || !strings.Contains(stderr, "unauthorized") {
		t.Errorf("a wrong key: exit %d %q, want 125", code, stderr)
	}
	if code, _, _ = runCLI(t, dir, env, "run", "--runtime", "runsc", "--", "true"); code != 2 {
		t.Errorf("--runtime against a server: exit %d, want 2", code)
	}
	// SIGINT destroys the session and exits 130
	cmd := exec.Command(bin, "run", "--", "sh", "-c", "echo started; sleep 60")
	cmd.Env = append(os.Environ(), env...)
	var out lockedBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "started") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("SIGINT: exit %d, want 130", code)
	}
	c := s.client(t, keyA, client.Options{})
	if list, err := c.ListSessions(ctx(t, time.Minute)); err != nil || len(list) != 0 {
		t.Errorf("sessions left on the server: %+v %v", list, err)
	}
	if n := len(leakcheck.Inits(s.pid)); n != 0 {
		t.Errorf("%d sandboxes left on the server", n)
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes it.
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
