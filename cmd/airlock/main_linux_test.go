package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestMain lets the test binary run as the airlock command itself, so
// tests can check real exit statuses, and checks for leaks at the end.
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_AS_CLI") == "1" {
		main()
		return
	}
	os.Exit(backendtest.Main(m, nil))
}

// airlock runs the command line as a separate process and returns its
// stdout, stderr and exit status.
func airlock(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_AS_CLI=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func needRoot(t *testing.T) {
	testenv.Require(t, "root, to run sandboxes with cgroups (CI runs as root)", testenv.Root())
}

func TestRunMainJob(t *testing.T) {
	needRoot(t)
	out, errs, code := airlock(t, "", "run", "--", "python3", "-c", "print(6*7)")
	if out != "42\n" || code != 0 {
		t.Errorf("airlock run -- python3 -c 'print(6*7)': stdout %q stderr %q exit %d", out, errs, code)
	}
}

func TestRunExitStatuses(t *testing.T) {
	needRoot(t)
	cases := []struct {
		name string
		args []string
		want int
	}{
		{"own code", []string{"run", "--", "sh", "-c", "exit 7"}, 7},
		{"timeout", []string{"run", "--timeout", "1s", "--", "sleep", "30"}, 124},
		{"memory", []string{"run", "--memory", "32MiB", "--", "python3", "-c", "x = bytearray(96 << 20)"}, 137},
		{"signal", []string{"run", "--", "sh", "-c", "kill -INT $$"}, 130},
	}
	for _, c := range cases {
		_, errs, code := airlock(t, "", c.args...)
		if code != c.want {
			t.Errorf("%s: exit %d, want %d (stderr %q)", c.name, code, c.want, errs)
		}
	}
}

// TestRunBadInput: a command line that is wrong exits 2 and says why, once;
// a failure met after it, while setting up the sandbox, exits 125.
func TestRunBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(file, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--bogus", "--", "true"}, 2, "flag provided but not defined"},
		{[]string{"run", "--memory", "0", "--", "true"}, 2, `--memory: size "0" must be above zero`},
		{[]string{"run", "--memory", "lots", "--", "true"}, 2, "not a number"},
		{[]string{"run", "--memory", "4TiB", "--", "true"}, 2, "out of range"},
		{[]string{"run", "--memory", "1MiB", "--", "true"}, 2, "out of range"},
		{[]string{"run", "--timeout", "0", "--", "true"}, 2, "above zero"},
		{[]string{"run", "--timeout", "forever", "--", "true"}, 2, "duration"},
		{[]string{"run", "--timeout", "48h", "--", "true"}, 2, "out of range"},
		{[]string{"run", "--cpus", "0", "--", "true"}, 2, "above zero"},
		{[]string{"run", "--cpus", "5000", "--", "true"}, 2, "out of range"},
		{[]string{"run", "--pids", "-3", "--", "true"}, 2, "above zero"},
		{[]string{"run", "--disk", "10PiB", "--", "true"}, 2, "unknown unit"},
		{[]string{"run", "--stdout-limit", "2GiB", "--", "true"}, 2, "out of range"},
		{[]string{"run", "--env", "NOEQUALS", "--", "true"}, 2, "want K=V"},
		{[]string{"run", "--input", filepath.Join(dir, "missing.csv"), "--", "true"}, 2, "no such file"},
		{[]string{"run", "--input", file + ":../x.csv", "--", "true"}, 2, "plain file name"},
		{[]string{"run", "--input", file + ":a/b.csv", "--", "true"}, 2, "plain file name"},
		{[]string{"run", "--input", dir, "--", "true"}, 2, "not a regular file"},
		{[]string{"run", "--input", file, "--input", file, "--", "true"}, 2, "two files named"},
		{[]string{"run", "--backend", "bogus", "--", "true"}, 2, "unknown backend"},
		{[]string{"run", "--lang", "ruby", "--code", file}, 2, "want python, bash or node"},
		{[]string{"run", "--lang", "python"}, 2, "needs --code"},
		{[]string{"run", "--lang", "python", "--code", filepath.Join(dir, "missing.py")}, 2, "no such file"},
		{[]string{"run", "--lang", "python", "--code", file, "--", "true"}, 2, "not both"},
		{[]string{"run", "--overwrite", "--", "true"}, 2, "--overwrite applies to --output"},
		{[]string{"run"}, 2, "nothing to run"},
		{[]string{"run", "--image", filepath.Join(dir, "no-such-image"), "--", "true"}, 125, "no such file"},
		{[]string{"run", "--image", "no-such-image", "--", "true"}, 125, "not built"},
	}
	for _, c := range cases {
		out, errs, code := airlock(t, "", c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || strings.Contains(errs, "panic") {
			t.Errorf("airlock %q: exit %d stderr %q stdout %q, want %d and %q", c.args, code, errs, out, c.code, c.want)
		}
		if strings.Contains(errs, sandbox.ErrInvalid.Error()) {
			t.Errorf("airlock %q: stderr %q repeats the sentinel's text", c.args, errs)
		}
	}
}

func TestRunCode(t *testing.T) {
	needRoot(t)
	out, errs, code := airlock(t, "import sys\nprint('from stdin', sys.version_info[0])\n", "run", "--lang", "python", "--code", "-")
	if out != "from stdin 3\n" || code != 0 {
		t.Errorf("--code -: %q %q %d", out, errs, code)
	}
	script := filepath.Join(t.TempDir(), "s.sh")
	if err := os.WriteFile(script, []byte("echo \"bash $((6*7))\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = airlock(t, "", "run", "--lang", "bash", "--code", script)
	if out != "bash 42\n" || code != 0 {
		t.Errorf("--lang bash: %q %q %d", out, errs, code)
	}
}

func TestRunStdin(t *testing.T) {
	needRoot(t)
	out, _, code := airlock(t, "piped in", "run", "--stdin", "--", "cat")
	if out != "piped in" || code != 0 {
		t.Errorf("--stdin: %q %d", out, code)
	}
	out, _, _ = airlock(t, "not passed", "run", "--", "cat")
	if out != "" {
		t.Errorf("without --stdin the command read %q", out)
	}
}

func TestRunInputOutputJSON(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "sales.csv")
	if err := os.WriteFile(in, []byte("region,amount\nnorth,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	script := `cat /workspace/input/data.csv > /workspace/output/copy.csv
printf 'a,b\n=HYPERLINK("x"),2\n' > /workspace/output/evil.csv
ln -s /etc/passwd /workspace/output/link.txt
echo done`
	stdout, errs, code := airlock(t, "", "run", "--json", "--env", "GREETING=hi", "--input", in+":data.csv", "--output", outDir, "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res sandbox.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json output is not a Result: %v\n%s", err, stdout)
	}
	if res.Stdout != "done\n" || res.Backend != "native" || res.ID == "" {
		t.Errorf("result: %+v", res)
	}
	verdicts := map[string]string{}
	for _, a := range res.Artifacts {
		verdicts[a.Path] = a.Verdict
	}
	want := map[string]string{"copy.csv": "accepted", "evil.csv": "sanitized", "link.txt": "rejected"}
	for p, v := range want {
		if verdicts[p] != v {
			t.Errorf("artifact %s: verdict %q, want %q (all: %v)", p, verdicts[p], v, verdicts)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "copy.csv")); err != nil || string(b) != "region,amount\nnorth,3\n" {
		t.Errorf("copy.csv on the host: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "evil.csv")); err != nil || !strings.Contains(string(b), `"'=HYPERLINK(""x"")"`) {
		t.Errorf("evil.csv on the host: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(outDir, "link.txt")); !os.IsNotExist(err) {
		t.Errorf("the symlink reached the host: %v", err)
	}
	// the JSON field names are part of the contract
	var raw map[string]any
	_ = json.Unmarshal([]byte(stdout), &raw)
	for _, k := range []string{"id", "backend", "exit_code", "signal", "timed_out", "oom_killed", "stdout", "stderr",
		"stdout_truncated", "stderr_truncated", "duration_ms", "usage", "artifacts", "egress"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("--json lacks field %q", k)
		}
	}
}

func TestDoctor(t *testing.T) {
	out, errs, code := airlock(t, "", "doctor")
	if os.Geteuid() == 0 && code != 0 {
		t.Errorf("doctor as root: exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"backend native", "seccomp", "landlock", "cgroup memory", "namespaces"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = airlock(t, "", "doctor", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Backends) == 0 {
		t.Errorf("doctor --json: %v\n%s", err, out)
	}
}

func TestUnknownCommand(t *testing.T) {
	_, errs, code := airlock(t, "", "frobnicate")
	if code != 2 || !strings.Contains(errs, "unknown command") {
		t.Errorf("unknown command: exit %d stderr %q", code, errs)
	}
}

// TestRunNetwork: with no --allow-host there is no network at all, and a
// request fails fast and says why; with one, the request goes through
// the egress proxy, whose decision the Result records.
func TestRunNetwork(t *testing.T) {
	needRoot(t)
	_, err := exec.LookPath("curl")
	testenv.Require(t, "curl in the host image (CI installs it)", err)
	start := time.Now()
	_, errs, code := airlock(t, "", "run", "--", "curl", "-sS", "--max-time", "20", "https://example.com/")
	if code == 0 || !strings.Contains(errs, "Could not resolve host") {
		t.Errorf("no --allow-host: exit %d stderr %q, want a resolve failure", code, errs)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("no --allow-host: took %v to fail; it must fail fast", d)
	}
	out, errs, _ := airlock(t, "", "run", "--json", "--allow-host", "example.com", "--", "curl", "-sS", "--max-time", "20", "https://other.example.org/")
	var res sandbox.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json: %v\n%s\n%s", err, out, errs)
	}
	if len(res.Egress) != 1 || res.Egress[0].Allowed || res.Egress[0].Host != "other.example.org" ||
		!strings.Contains(res.Stderr, "403") {
		t.Errorf("a host not on the list: egress %+v, stderr %q", res.Egress, res.Stderr)
	}
}
