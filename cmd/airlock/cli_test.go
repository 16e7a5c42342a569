package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// cliRun is one in-process run of the command line.
type cliRun struct {
	ctx       context.Context
	stdin     string
	terminal  bool // stdout and stderr are terminals
	buildInfo func() (*debug.BuildInfo, bool)
	getenv    func(string) string
	// onStdout, when set, sees every write to stdout.
	onStdout func([]byte)
}

// hookWriter calls a function on every write.
type hookWriter struct {
	w    io.Writer
	hook func([]byte)
}

// Write implements io.Writer.
func (h *hookWriter) Write(p []byte) (int, error) {
	h.hook(p)
	return h.w.Write(p)
}

// run runs args in-process and returns stdout, stderr and the exit status.
func (c cliRun) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	var stdout io.Writer = &out
	if c.onStdout != nil {
		stdout = &hookWriter{&out, c.onStdout}
	}
	env := &cliEnv{stdin: strings.NewReader(c.stdin), stdout: stdout, stderr: &errb, getenv: c.getenv, buildInfo: c.buildInfo}
	if env.getenv == nil {
		env.getenv = func(string) string { return "" }
	}
	if c.terminal {
		env.isTerminal = func(w io.Writer) bool { return w == stdout || w == io.Writer(&errb) }
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := dispatch(ctx, env, args)
	return out.String(), errb.String(), code
}

// TestHelp: every way of asking for help prints the usage on stdout and
// exits 0; no command at all prints it on stderr and exits 2.
func TestHelp(t *testing.T) {
	tests := []struct {
		args   []string
		stdout string // what stdout starts with; "" means it stays empty
		stderr string // what stderr holds; "" means it stays empty
		code   int
	}{
		{[]string{"--help"}, "usage: airlock COMMAND", "", 0},
		{[]string{"-h"}, "usage: airlock COMMAND", "", 0},
		{[]string{"help"}, "usage: airlock COMMAND", "", 0},
		{[]string{"help", "run"}, "usage: airlock run [flags]", "", 0},
		{[]string{"run", "--help"}, "usage: airlock run [flags]", "", 0},
		{[]string{"run", "-h"}, "usage: airlock run [flags]", "", 0},
		{[]string{"run", "--memory", "1GiB", "--help"}, "usage: airlock run [flags]", "", 0},
		{[]string{"help", "doctor"}, "usage: airlock doctor", "", 0},
		{[]string{"doctor", "--help"}, "usage: airlock doctor", "", 0},
		{[]string{"help", "image"}, "usage:\n  airlock image build", "", 0},
		{[]string{"image", "--help"}, "usage:\n  airlock image build", "", 0},
		{[]string{"image", "help"}, "usage:\n  airlock image build", "", 0},
		{[]string{"help", "image", "build"}, "usage: airlock image build NAME", "", 0},
		{[]string{"image", "build", "--help"}, "usage: airlock image build NAME", "", 0},
		{[]string{"image", "ls", "-h"}, "usage: airlock image ls", "", 0},
		{[]string{"help", "version"}, "usage: airlock version", "", 0},
		{[]string{"version", "--help"}, "usage: airlock version", "", 0},
		{nil, "", "usage: airlock COMMAND", 2},
		{[]string{"help", "frobnicate"}, "", `unknown command "frobnicate"`, 2},
		{[]string{"frobnicate"}, "", `unknown command "frobnicate"`, 2},
		{[]string{"--frobnicate"}, "", `unknown flag "--frobnicate"`, 2},
		{[]string{"image"}, "", "usage:\n  airlock image build", 2},
	}
	for _, tt := range tests {
		out, errs, code := cliRun{}.run(t, tt.args...)
		if code != tt.code || !strings.HasPrefix(out, tt.stdout) || (tt.stdout == "") != (out == "") ||
			!strings.Contains(errs, tt.stderr) || (tt.stderr == "") != (errs == "") {
			t.Errorf("airlock %q: exit %d, stdout %.80q, stderr %.80q; want %d, stdout %q, stderr %q",
				tt.args, code, out, errs, tt.code, tt.stdout, tt.stderr)
		}
	}
	out, _, _ := cliRun{}.run(t, "run", "--help")
	for _, flag := range []string{"--allow-host HOST[:PORT]", "--allow-cidr CIDR[:PORT]", "--overwrite", "--allow-hidden", "--raw", "--timeout DURATION"} {
		if !strings.Contains(out, "\n  "+flag) {
			t.Errorf("airlock run --help lacks %q:\n%s", flag, out)
		}
	}
}

// TestVersion: both spellings print the module version and the commit
// that the build recorded, and say so honestly when it recorded none.
func TestVersion(t *testing.T) {
	stamped := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/airlock-sandbox/airlock", Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
				{Key: "vcs.time", Value: "2026-05-01T12:30:00Z"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	devel := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/airlock-sandbox/airlock", Version: "(devel)"}}, true
	}
	tests := []struct {
		name string
		bi   func() (*debug.BuildInfo, bool)
		want string
	}{
		{"stamped", stamped, "airlock v1.4.0, commit 0123456789abcdef0123456789abcdef01234567 (modified), committed 2026-05-01T12:30:00Z, built with go1.26.8\n"},
		{"from a source tree, no VCS stamp", devel, "airlock (devel), commit unknown, committed unknown, built with go1.26.8\n"},
		{"no build information", func() (*debug.BuildInfo, bool) { return nil, false }, "airlock (devel), commit unknown, committed unknown, built with unknown\n"},
		{"this test binary", debug.ReadBuildInfo, ""},
	}
	for _, tt := range tests {
		for _, args := range [][]string{{"version"}, {"--version"}} {
			out, errs, code := cliRun{buildInfo: tt.bi}.run(t, args...)
			if code != 0 || errs != "" || tt.want != "" && out != tt.want || !strings.HasPrefix(out, "airlock ") {
				t.Errorf("%s: airlock %s: %q %q %d, want %q", tt.name, args[0], out, errs, code, tt.want)
			}
		}
	}
	if _, errs, code := (cliRun{}).run(t, "version", "extra"); code != 2 || !strings.Contains(errs, "takes no arguments") {
		t.Errorf("version extra: %q %d", errs, code)
	}
}

// TestUsageErrors: a wrong command line exits 2 in every subcommand, and
// its message says the cause once: the flag once, no "invalid argument"
// after a message that already says what is wrong.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
		flag string // a name that must appear exactly once, or ""
	}{
		{[]string{"run", "--bogus", "--", "true"}, "flag provided but not defined: -bogus", "bogus"},
		{[]string{"run", "--timeout", "1e300", "--", "true"}, `--timeout: duration "1e300" is too large`, "timeout"},
		{[]string{"run", "--timeout", "-1e300", "--", "true"}, `--timeout: duration "-1e300" is out of range`, "timeout"},
		{[]string{"run", "--timeout", "NaN", "--", "true"}, `--timeout: duration "NaN": not a number`, "timeout"},
		{[]string{"run", "--memory", "99999999999TiB", "--", "true"}, `--memory: size "99999999999TiB" is too large`, "memory"},
		{[]string{"run", "--pids", "1e99", "--", "true"}, `--pids: "1e99" is too large`, "pids"},
		{[]string{"run", "--pids", "99999999999999999999", "--", "true"}, `--pids: "99999999999999999999" is too large`, "pids"},
		{[]string{"run", "--pids", "2.5", "--", "true"}, `--pids: "2.5" is not a whole number`, "pids"},
		{[]string{"run", "--pids", "0", "--", "true"}, `--pids: "0" must be above zero`, "pids"},
		{[]string{"run", "--cpus", "1e309", "--", "true"}, `--cpus: "1e309" is too large`, "cpus"},
		{[]string{"run", "--cpus", "NaN", "--", "true"}, `--cpus: "NaN" is not a number`, "cpus"},
		{[]string{"run", "--cpus", "-1", "--", "true"}, `--cpus: "-1" must be above zero`, "cpus"},
		{[]string{"run", "--disk", "0", "--", "true"}, `--disk: size "0" must be above zero`, "disk"},
		{[]string{"run", "--allow-host", "10.0.0.1/8", "--", "true"}, "did you mean 10.0.0.0/8?", "allow-host"},
		{[]string{"run", "--allow-cidr", "example.com", "--", "true"}, "not an address range", "allow-cidr"},
		{[]string{"run", "--json=maybe", "--", "true"}, "invalid boolean value", ""},
		{[]string{"run"}, "nothing to run", ""},
		{[]string{"run", "--backend", "bogus", "--", "true"}, `unknown backend "bogus"`, ""},
		{[]string{"run", "--runtime", "runsc", "--", "true"}, "--runtime applies to --backend docker only", "runtime"},
		{[]string{"doctor", "--bogus"}, "flag provided but not defined", ""},
		{[]string{"doctor", "extra"}, "takes no arguments", ""},
		{[]string{"image", "frobnicate"}, "unknown subcommand", ""},
		{[]string{"image", "build", "--nope", "python"}, "flag provided but not defined", ""},
		{[]string{"image", "rm"}, "exactly one image NAME", ""},
		{[]string{"version", "--bogus"}, "flag provided but not defined", ""},
	}
	for _, tt := range tests {
		_, errs, code := cliRun{}.run(t, tt.args...)
		if code != exitUsage || !strings.Contains(errs, tt.want) {
			t.Errorf("airlock %q: exit %d, stderr %q; want 2 saying %q", tt.args, code, errs, tt.want)
		}
		if strings.Contains(errs, sandbox.ErrInvalid.Error()) {
			t.Errorf("airlock %q: stderr %q says %q on top of its cause", tt.args, errs, sandbox.ErrInvalid)
		}
		if tt.flag != "" && strings.Count(errs, tt.flag) != 1 {
			t.Errorf("airlock %q: stderr %q names %q %d times, want once", tt.args, errs, tt.flag, strings.Count(errs, tt.flag))
		}
	}
}

// TestErrText: the sentinel's text leaves the end of a message that wraps
// it, and nothing else does; other errors keep every word.
func TestErrText(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("memory 4TiB is out of range: %w", sandbox.ErrInvalid), "memory 4TiB is out of range"},
		{fmt.Errorf("--code: %w: %w", fmt.Errorf("open x: no such file"), sandbox.ErrInvalid), "--code: open x: no such file"},
		{fmt.Errorf("egress rule 0: %w", fmt.Errorf("port 0: %w", sandbox.ErrInvalid)), "egress rule 0: port 0"},
		{fmt.Errorf("read x: invalid argument"), "read x: invalid argument"},
		{fmt.Errorf("image x: %w", sandbox.ErrNotFound), "image x: not found"},
	}
	for _, tt := range tests {
		if got := errText(tt.err); got != tt.want {
			t.Errorf("errText(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestParseAllow: each form of --allow-host and --allow-cidr gives its
// rule, and everything malformed is refused before a sandbox starts.
func TestParseAllow(t *testing.T) {
	tests := []struct {
		in       string
		cidrOnly bool
		want     sandbox.EgressRule // zero: refused
	}{
		{"example.com", false, sandbox.EgressRule{Host: "example.com"}},
		{"*.example.com", false, sandbox.EgressRule{Host: "*.example.com"}},
		{"example.com:8443", false, sandbox.EgressRule{Host: "example.com", Ports: []int{8443}}},
		{"*.example.com:8080", false, sandbox.EgressRule{Host: "*.example.com", Ports: []int{8080}}},
		{"Example.COM.", false, sandbox.EgressRule{Host: "Example.COM."}},
		{"10.1.2.3", false, sandbox.EgressRule{CIDR: "10.1.2.3/32"}},
		{"10.1.2.3:11434", false, sandbox.EgressRule{CIDR: "10.1.2.3/32", Ports: []int{11434}}},
		{"[2001:db8::1]", false, sandbox.EgressRule{CIDR: "2001:db8::1/128"}},
		{"[2001:db8::1]:8443", false, sandbox.EgressRule{CIDR: "2001:db8::1/128", Ports: []int{8443}}},
		{"2001:db8::1", false, sandbox.EgressRule{CIDR: "2001:db8::1/128"}},
		{"10.0.0.0/8", false, sandbox.EgressRule{CIDR: "10.0.0.0/8"}},
		{"10.0.0.0/8:11434", false, sandbox.EgressRule{CIDR: "10.0.0.0/8", Ports: []int{11434}}},
		{"fd00::/8", false, sandbox.EgressRule{CIDR: "fd00::/8"}},
		{"[fd00::/8]:8443", false, sandbox.EgressRule{CIDR: "fd00::/8", Ports: []int{8443}}},
		{"10.0.0.0/8", true, sandbox.EgressRule{CIDR: "10.0.0.0/8"}},
		{"10.1.2.3/32:11434", true, sandbox.EgressRule{CIDR: "10.1.2.3/32", Ports: []int{11434}}},
		{"[fd00::/8]:8443", true, sandbox.EgressRule{CIDR: "fd00::/8", Ports: []int{8443}}},
		{"example.com", true, sandbox.EgressRule{}},
		{"10.1.2.3", true, sandbox.EgressRule{}},
		{"", false, sandbox.EgressRule{}},
		{":443", false, sandbox.EgressRule{}},
		{"example.com:", false, sandbox.EgressRule{}},
		{"example.com:0", false, sandbox.EgressRule{}},
		{"example.com:65536", false, sandbox.EgressRule{}},
		{"example.com:+80", false, sandbox.EgressRule{}},
		{"example.com:080", false, sandbox.EgressRule{}},
		{"example.com:http", false, sandbox.EgressRule{}},
		{"example.com:80:81", false, sandbox.EgressRule{}},
		{"user@example.com", false, sandbox.EgressRule{}},
		{"exa mple.com", false, sandbox.EgressRule{}},
		{"*", false, sandbox.EgressRule{}},
		{"*.10.0.0.1", false, sandbox.EgressRule{}},
		{"127.1", false, sandbox.EgressRule{}},
		{"2130706433", false, sandbox.EgressRule{}},
		{"0x7f.1:80", false, sandbox.EgressRule{}},
		{"[10.1.2.3]:80", false, sandbox.EgressRule{}},
		{"[::ffff:10.1.2.3]", false, sandbox.EgressRule{}},
		{"[2001:db8::1", false, sandbox.EgressRule{}},
		{"[2001:db8::1]8443", false, sandbox.EgressRule{}},
		{"[fe80::1%eth0]", false, sandbox.EgressRule{}},
		{"10.0.0.1/8", false, sandbox.EgressRule{}},
		{"10.0.0.0/33", false, sandbox.EgressRule{}},
		{"10.0.0.0/8:0", false, sandbox.EgressRule{}},
		{"::ffff:10.0.0.0/104", false, sandbox.EgressRule{}},
	}
	for _, tt := range tests {
		got, err := parseAllow(tt.in, tt.cidrOnly)
		refused := reflect.DeepEqual(tt.want, sandbox.EgressRule{})
		switch {
		case refused && err == nil:
			t.Errorf("parseAllow(%q, %v) = %+v, want it refused", tt.in, tt.cidrOnly, got)
		case refused && !errors.Is(err, sandbox.ErrInvalid):
			t.Errorf("parseAllow(%q, %v): %v, want ErrInvalid", tt.in, tt.cidrOnly, err)
		case !refused && (err != nil || !reflect.DeepEqual(got, tt.want)):
			t.Errorf("parseAllow(%q, %v) = %+v, %v; want %+v", tt.in, tt.cidrOnly, got, err, tt.want)
		}
	}
}

// TestAllowHintParses: the rule the egress proxy's refusals suggest is
// one that --allow-host and --allow-cidr read back as that address's own
// prefix on that port.
func TestAllowHintParses(t *testing.T) {
	for _, addr := range []string{"10.1.2.3", "192.168.0.1", "100.64.1.1", "fd00::1", "::ffff:10.1.2.3", "2001:db8::7"} {
		for _, port := range []int{80, 443, 8443, 11434} {
			a := netip.MustParseAddr(addr).Unmap()
			hint := egress.AllowHint(a, port)
			for _, cidrOnly := range []bool{false, true} {
				r, err := parseAllow(hint, cidrOnly)
				if err != nil {
					t.Errorf("the hint %q for %s:%d: %v", hint, a, port, err)
					continue
				}
				p, err := netip.ParsePrefix(r.CIDR)
				okPorts := len(r.Ports) == 0 && (port == 80 || port == 443) || reflect.DeepEqual(r.Ports, []int{port})
				if err != nil || p.Addr() != a || p.Bits() != a.BitLen() || !okPorts {
					t.Errorf("the hint %q for %s:%d reads back as %+v", hint, a, port, r)
				}
			}
		}
	}
}

// TestWriteJSONEscapesControls: every control character in a string of
// the JSON output is an escape, ESC as \u001b, and the output still reads
// back as the same value.
func TestWriteJSONEscapesControls(t *testing.T) {
	hostile := "\x1b]52;c;eA==\a\x1b[2J\x1b[8mhidden\r\b\x00\x7f\u009b31m\u0085é🙂"
	res := sandbox.Result{Stdout: hostile, Stderr: hostile, Artifacts: []sandbox.Artifact{{Path: "a.csv", Reason: hostile}}}
	var b bytes.Buffer
	if err := writeJSON(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`\u001b]52;c;eA==\u0007`, `\u001b[2J`, `\r\b\u0000\u007f\u009b31m\u0085é🙂`} {
		if !strings.Contains(out, want) {
			t.Errorf("JSON output lacks %s:\n%s", want, out)
		}
	}
	for _, r := range out {
		if r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f {
			t.Errorf("JSON output holds the raw control %U", r)
		}
	}
	var back sandbox.Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Stdout != hostile || back.Artifacts[0].Reason != hostile {
		t.Errorf("the JSON does not read back: %v %q", err, back.Stdout)
	}
}
