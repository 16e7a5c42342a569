//go:build linux

package backendtest

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// abuses are what code does to wreck the sandbox it runs in. After each,
// the next process in the same sandbox must run and print.
var abuses = []struct {
	name, script string
}{
	{"fork bomb at the cap", "bomb() { bomb | bomb & }; bomb; sleep 3"},
	{"memory bomb at twice the cap", `python3 -c 'x = bytearray(128 << 20); import time; time.sleep(1)'`},
	{"fd exhaustion", `python3 -c '
import os
fds = []
try:
    while True: fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError: pass
import time; time.sleep(0.5)
'`},
	{"disk fill", "cat /dev/zero > /tmp/fill; cat /dev/zero > /workspace/output/fill; echo filled"},
	{"inode fill", `python3 -c '
import os
n = 0
try:
    while True:
        open("/tmp/i%d" % n, "w").close(); n += 1
except OSError: print(n)
'`},
	{"10 GiB of stdout", "head -c 10737418240 /dev/zero"},
	{"a process that ignores every signal", `python3 -c '
import signal, time, os
for s in range(1, 65):
    try: signal.signal(s, signal.SIG_IGN)
    except (OSError, ValueError, RuntimeError): pass
if os.fork() == 0:
    os.setsid()
    time.sleep(600)
time.sleep(600)
'`},
	{"a process that stops itself", "sh -c 'kill -STOP $$' & sleep 600"},
}

// testSurvives runs each abuse and then an ordinary command in the same
// sandbox, which must print what it prints; the abuse's own Result must
// say what happened where the contract says so.
func (s *suite) testSurvives(t *testing.T) {
	for _, a := range abuses {
		t.Run(a.name, func(t *testing.T) {
			s.skip(t, "survives "+a.name)
			inst := s.create(t, Policy(t, func(p *sandbox.Policy) {
				p.Limits.Pids = 64
				p.Limits.MemoryBytes = 64 << 20
				p.Limits.DiskBytes = 16 << 20
				p.Limits.DiskInodes = 512
				p.Limits.OpenFiles = 256
				p.Limits.Timeout = s.scaled(4 * time.Second)
			}))
			res := sh(t, inst, a.script)
			switch a.name {
			case "memory bomb at twice the cap":
				if !res.OOMKilled || res.ExitCode != sandbox.ExitOOM {
					t.Errorf("memory bomb: exit %d oom_killed %v, want 137 and true", res.ExitCode, res.OOMKilled)
				}
			case "10 GiB of stdout":
				if !res.StdoutTruncated {
					t.Errorf("the flood's stdout was not truncated")
				}
			case "a process that ignores every signal", "a process that stops itself":
				if !res.TimedOut {
					t.Errorf("%s: not timed out: exit %d", a.name, res.ExitCode)
				}
			}
			next := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "echo next; ls /proc | grep -c '^[0-9]'"}})
			lines := strings.Fields(next.Stdout)
			if next.ExitCode != 0 || len(lines) != 2 || lines[0] != "next" {
				t.Fatalf("the next command after %s: exit %d stdout %q stderr %q", a.name, next.ExitCode, next.Stdout, next.Stderr)
			}
			t.Logf("after %s (exit %d, %.0f ms): the next command ran; %s processes visible", a.name, res.ExitCode, res.DurationMS, lines[1])
		})
	}
}
