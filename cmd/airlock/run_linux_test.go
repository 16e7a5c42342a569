package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// hostileOutput prints on stdout a window title, a colour, a screen
// clear and a lone carriage return, and on stderr concealed text, without
// ending either line; then it leaves a hidden file, whose rejection airlock
// reports on stderr.
const hostileOutput = `printf '\033]0;pwned\007\033[31mred\033[2J50%%\r'
printf 'err\033[8mhidden' >&2
echo x > /workspace/output/.secret.txt`

// TestRunTerminalOutput: on a terminal the command's control sequences
// are shown as text, its colours pass, and airlock's own line starts on a
// line of its own after a reset; --raw passes the bytes through but still
// starts airlock's line afresh; off a terminal nothing is changed.
func TestRunTerminalOutput(t *testing.T) {
	needRoot(t)
	const report = "airlock: artifact .secret.txt: rejected (hidden name"
	tests := []struct {
		name           string
		terminal       bool
		args           []string
		stdout, stderr string
	}{
		{"terminal", true, nil, "^[]0;pwned^G\x1b[31mred^[[2J50%^M", "err^[[8mhidden\x1b[0m\n" + report},
		{"terminal, raw", true, []string{"--raw"}, "\x1b]0;pwned\a\x1b[31mred\x1b[2J50%\r", "err\x1b[8mhidden\x1b[0m\n" + report},
		{"not a terminal", false, nil, "\x1b]0;pwned\a\x1b[31mred\x1b[2J50%\r", "err\x1b[8mhidden" + report},
	}
	for _, tt := range tests {
		args := append(append([]string{"run"}, tt.args...), "--", "sh", "-c", hostileOutput)
		out, errs, code := cliRun{terminal: tt.terminal}.run(t, args...)
		if code != 0 || out != tt.stdout || !strings.HasPrefix(errs, tt.stderr) || !strings.HasSuffix(errs, ")\n") {
			t.Errorf("%s: exit %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q…", tt.name, code, out, tt.stdout, errs, tt.stderr)
		}
	}
}

// sandboxTraces lists the cgroup folders of sandboxes that the process
// pid owns (they are named PID-STARTTIME-ID); Destroy removes them, and
// only the next start cleans up after an airlock that died without it.
func sandboxTraces(t *testing.T, pid int) []string {
	t.Helper()
	return leakcheck.Cgroups(pid)
}

// TestRunInterrupt: when the context ends by a signal while the command
// runs, airlock run destroys the sandbox, says it was interrupted, and
// exits with 128 plus the signal's number.
func TestRunInterrupt(t *testing.T) {
	needRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		ctx, cancel := context.WithCancelCause(context.Background())
		var once sync.Once
		c := cliRun{ctx: ctx, onStdout: func(p []byte) {
			if strings.Contains(string(p), "ready") {
				once.Do(func() { cancel(interrupted{sig}) })
			}
		}}
		start := time.Now()
		out, errs, code := c.run(t, "run", "--timeout", "60s", "--", "sh", "-c", "echo ready; sleep 60")
		if want := 128 + int(sig); code != want || out != "ready\n" || !strings.HasSuffix(errs, "airlock: interrupted\n") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and airlock: interrupted", sig, code, out, errs, want)
		}
		if strings.Contains(errs, "context canceled") {
			t.Errorf("%v: stderr %q reports the cancelled context as a failure", sig, errs)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%v: took %v", sig, d)
		}
		if left := sandboxTraces(t, os.Getpid()); len(left) > 0 {
			t.Errorf("%v: the sandbox was not destroyed: %v", sig, left)
		}
		cancel(nil)
	}
}

// TestRunSignals sends real signals to an airlock run process: it
// destroys its sandbox before it exits with 130 or 143, which the cgroup
// folders named after it show.
func TestRunSignals(t *testing.T) {
	needRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "run", "--timeout", "60s", "--", "sh", "-c", "echo ready; sleep 60")
		cmd.Env = append(os.Environ(), "AIRLOCK_TEST_AS_CLI=1")
		var errb strings.Builder
		cmd.Stderr = &errb
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v: first line %q, %v; stderr %q", sig, line, err, errb.String())
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if want := 128 + int(sig); code != want || !strings.HasSuffix(errb.String(), "airlock: interrupted\n") {
			t.Errorf("%v: exit %d (%v), stderr %q; want %d and airlock: interrupted", sig, code, err, errb.String(), want)
		}
		if left := sandboxTraces(t, cmd.Process.Pid); len(left) > 0 {
			t.Errorf("%v: airlock exited without destroying its sandbox: %v", sig, left)
		}
	}
}

// runJSON runs airlock run --json in-process and reads the Result; the
// exit status must be the command's own.
func runJSON(t *testing.T, args ...string) sandbox.Result {
	t.Helper()
	out, errs, code := cliRun{}.run(t, append([]string{"run", "--json"}, args...)...)
	var res sandbox.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != res.ExitCode {
		t.Fatalf("airlock run --json %q: exit %d, %v\nstdout %s\nstderr %s", args, code, err, out, errs)
	}
	return res
}

// verdict returns the artifact at path.
func verdict(t *testing.T, res sandbox.Result, path string) sandbox.Artifact {
	t.Helper()
	for _, a := range res.Artifacts {
		if a.Path == path {
			return a
		}
	}
	t.Fatalf("no artifact %s in %+v", path, res.Artifacts)
	return sandbox.Artifact{}
}

// TestRunOutputKeepsFiles: --output never replaces a file it holds unless
// --overwrite; hidden files stay in unless --allow-hidden.
func TestRunOutputKeepsFiles(t *testing.T) {
	needRoot(t)
	dst := t.TempDir()
	write := func(s string) []string {
		return []string{"--", "sh", "-c", "echo " + s + " > /workspace/output/report.csv; echo " + s + " > /workspace/output/.env.txt"}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dst, name))
		return string(b)
	}

	res := runJSON(t, append([]string{"--output", dst}, write("first")...)...)
	if a := verdict(t, res, "report.csv"); a.Verdict != sandbox.VerdictAccepted || read("report.csv") != "first\n" {
		t.Errorf("first run: %+v, file %q", a, read("report.csv"))
	}
	if a := verdict(t, res, ".env.txt"); a.Verdict != sandbox.VerdictRejected || !strings.Contains(a.Reason, "--allow-hidden") {
		t.Errorf("a hidden file: %+v, want rejected pointing at --allow-hidden", a)
	}
	if _, err := os.Lstat(filepath.Join(dst, ".env.txt")); !os.IsNotExist(err) {
		t.Errorf("the hidden file reached the host: %v", err)
	}

	res = runJSON(t, append([]string{"--output", dst}, write("second")...)...)
	if a := verdict(t, res, "report.csv"); a.Verdict != sandbox.VerdictRejected || !strings.Contains(a.Reason, "--overwrite") || read("report.csv") != "first\n" {
		t.Errorf("second run without --overwrite: %+v, file %q; want rejected, the first file kept", a, read("report.csv"))
	}

	res = runJSON(t, append([]string{"--output", dst, "--overwrite", "--allow-hidden"}, write("third")...)...)
	if a := verdict(t, res, "report.csv"); a.Verdict != sandbox.VerdictAccepted || read("report.csv") != "third\n" {
		t.Errorf("third run with --overwrite: %+v, file %q", a, read("report.csv"))
	}
	if a := verdict(t, res, ".env.txt"); a.Verdict != sandbox.VerdictAccepted || read(".env.txt") != "third\n" {
		t.Errorf("--allow-hidden: %+v, file %q", a, read(".env.txt"))
	}
}

// TestRunPrivateAddressHint: a host rule whose name resolves to a loopback
// address is refused with the rule that allows it; given that rule, the
// same request goes through, to a server on this host's loopback.
func TestRunPrivateAddressHint(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("needs curl in the host image: %v (CI installs it)", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") }))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	args := []string{"--allow-host", "localhost:" + port}
	hint := regexp.MustCompile(`allow it with --allow-host (\S+) \(or --allow-cidr`)
	// localhost may resolve to ::1 and 127.0.0.1: each refusal names one.
	for range 3 {
		res := runJSON(t, append(args, "--", "curl", "-sS", "--max-time", "10", "http://localhost:"+port+"/")...)
		if res.Stdout == "hello from the host" {
			return
		}
		if len(res.Egress) == 0 || res.Egress[0].Allowed {
			t.Fatalf("with %q: stdout %q stderr %q egress %+v", args, res.Stdout, res.Stderr, res.Egress)
		}
		m := hint.FindStringSubmatch(res.Egress[0].Reason)
		if m == nil || !strings.Contains(res.Egress[0].Reason, "which is loopback") {
			t.Fatalf("refusal %q names no rule that allows it", res.Egress[0].Reason)
		}
		args = append(args, "--allow-host", m[1])
	}
	t.Errorf("with the suggested rules %q the request still fails", args)
}
