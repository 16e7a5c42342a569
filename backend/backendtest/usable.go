//go:build linux

package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// testNextCommand runs, in one sandbox, each of the attacks that try to
// leave it unusable, and after each the next command: it must run and
// print its output, every time.
func (s *suite) testNextCommand(t *testing.T) {
	// large enough that a fork bomb at the pids cap is not also a memory
	// bomb under gVisor, whose sentry holds each task's kernel state
	const memory = 256 << 20
	p := Policy(t, func(p *sandbox.Policy) {
		p.Limits.Pids = 64
		p.Limits.MemoryBytes = memory
		p.Limits.DiskBytes = 16 << 20
		p.Limits.DiskInodes = 1000
		p.Limits.OpenFiles = 256
		p.Limits.Timeout = s.scaled(20 * time.Second)
	})
	inst := s.create(t, p)
	ctx := context.Background()
	attacks := []struct {
		name    string
		spec    sandbox.ProcessSpec
		check   func(sandbox.Result) error
		cleanup func() error
	}{
		{name: "fork bomb at the cap", spec: shSpec("bomb() { bomb | bomb & }; bomb; sleep 2")},
		{name: "memory bomb at twice the cap", spec: sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
			fmt.Sprintf("x = bytearray(%d)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')", 2*memory)}},
			check: func(r sandbox.Result) error {
				if !r.OOMKilled || r.ExitCode != sandbox.ExitOOM {
					return fmt.Errorf("oom_killed %v exit %d, want true and %d", r.OOMKilled, r.ExitCode, sandbox.ExitOOM)
				}
				return nil
			}},
		{name: "fd exhaustion", spec: sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
			"import os\nfds = []\ntry:\n    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError as e: print(len(fds), e.errno)"}},
			check: func(r sandbox.Result) error {
				if !strings.HasSuffix(strings.TrimSpace(r.Stdout), " 24") {
					return fmt.Errorf("open until refused: %q, want EMFILE (24)", r.Stdout)
				}
				return nil
			}},
		{name: "disk fill", spec: shSpec("dd if=/dev/zero of=/tmp/fill bs=1M 2>&1; dd if=/dev/zero of=/workspace/output/fill bs=1M 2>&1; echo filled"),
			cleanup: func() error {
				return errors.Join(inst.Files().Remove(ctx, "/tmp/fill"), inst.Files().Remove(ctx, "/workspace/output/fill"))
			}},
		{name: "inode fill", spec: sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
			"import os\nos.mkdir('/tmp/inodes')\nn = 0\ntry:\n    while True: open(f'/tmp/inodes/{n}', 'w').close(); n += 1\nexcept OSError as e: print(n, e.errno)"}},
			cleanup: func() error { return inst.Files().Remove(ctx, "/tmp/inodes") }},
		{name: "a 10 GiB stdout flood", spec: sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "yes | head -c 10737418240"},
			Timeout: s.scaled(10 * time.Second)},
			check: func(r sandbox.Result) error {
				if !r.StdoutTruncated || int64(len(r.Stdout)) != p.Limits.OutputBytes {
					return fmt.Errorf("stdout %d bytes, truncated %v", len(r.Stdout), r.StdoutTruncated)
				}
				return nil
			}},
		{name: "a process ignoring every signal, and its child in a session of its own", spec: sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
			"import os, signal, time\nfor s in range(1, signal.NSIG):\n    try: signal.signal(s, signal.SIG_IGN)\n    except (OSError, ValueError): pass\nif os.fork() == 0: os.setsid()\nprint('ignoring', flush=True)\nwhile True: time.sleep(1)"},
			Timeout: s.scaled(2 * time.Second)}, check: timedOut},
		{name: "a stopped process", spec: sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "sleep 100 & kill -STOP $!; kill -STOP $$"},
			Timeout: s.scaled(2 * time.Second)}, check: timedOut},
	}
	for _, a := range attacks {
		if a.name == "memory bomb at twice the cap" && s.skipped(t, "next command after a memory bomb") {
			continue
		}
		start := time.Now()
		res := Exec(t, inst, a.spec)
		if a.check != nil {
			if err := a.check(res); err != nil {
				t.Errorf("%s: %v (stderr %.200q)", a.name, err, res.Stderr)
			}
		}
		attack := time.Since(start)
		start = time.Now()
		next := sh(t, inst, "echo next")
		if next.Stdout != "next\n" || next.ExitCode != 0 {
			t.Errorf("the command after %s: %q exit %d stderr %.200q", a.name, next.Stdout, next.ExitCode, next.Stderr)
		}
		t.Logf("%s: %v (exit %d), then the next command in %v", a.name, attack.Round(time.Millisecond), res.ExitCode, time.Since(start).Round(time.Millisecond))
		if a.cleanup != nil {
			if err := a.cleanup(); err != nil {
				t.Errorf("%s: cleaning up: %v", a.name, err)
			}
		}
	}
}

func shSpec(script string) sandbox.ProcessSpec {
	return sandbox.ProcessSpec{Cmd: []string{"sh", "-c", script}}
}

func timedOut(r sandbox.Result) error {
	if !r.TimedOut || r.ExitCode != sandbox.ExitTimeout {
		return fmt.Errorf("timed_out %v exit %d, want true and %d", r.TimedOut, r.ExitCode, sandbox.ExitTimeout)
	}
	return nil
}

// testChannelAttack plays the code that attacks the host's channels to
// the sandbox: it reopens, through /proc, every descriptor of every
// process it may reach (its parent's pipes, a KeepAlive process's, its
// own), and writes the lines a host might read there ("ended", "swept",
// a forged pid line, garbage), then leaves a daemon behind. The host
// must not care: the process gets a Result, the daemon is swept, the
// KeepAlive process lives on and is followed as before, and the sandbox
// runs the next command.
func (s *suite) testChannelAttack(t *testing.T) {
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.Timeout = s.scaled(20 * time.Second) }))
	ctx := context.Background()
	mark := randomMark(t)
	var kaOut testenv.Buffer
	ka, err := inst.Start(ctx, sandbox.ProcessSpec{KeepAlive: true, Stdout: &kaOut,
		Cmd: []string{"sh", "-c", "echo ka; while :; do sleep 0.1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(kaOut.String(), "ka"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the KeepAlive process did not start")
		}
	}
	attack := fmt.Sprintf(`
import os, subprocess, sys
lines = b"ended\nended\nswept\nfailed\nairlock-pid 1\nairlock-pid 99999999999\n{\"exit_code\": 0}\n" + bytes(range(256)) + b"\n"
hit = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        for _ in range(2):
            try:
                w = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                break
            try:
                os.write(w, lines)
                hit += 1
            except OSError:
                pass
            os.close(w)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        os.execvp("sleep", ["sleep", "600", %q])
    os._exit(0)
print("wrote", hit > 0)
`, mark)
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", attack}})
	if !strings.Contains(res.Stdout, "wrote True") {
		t.Errorf("the attack reached no descriptor: %q %q", res.Stdout, res.Stderr)
	}
	if pids := hostProcesses(mark); len(pids) > 0 {
		t.Errorf("the attacker's daemon outlived it: host pids %v", pids)
	}
	if n := marked(t, inst, mark); n != 0 {
		t.Errorf("the attacker's daemon is still in the sandbox: %d processes", n)
	}
	next := sh(t, inst, "echo next")
	if next.Stdout != "next\n" {
		t.Errorf("the command after the attack: %q %q", next.Stdout, next.Stderr)
	}
	select {
	case <-inst.Done():
		t.Fatalf("the sandbox ended: %v", inst.Err())
	default:
	}
	if err := ka.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Errorf("signal the KeepAlive process: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if kres, err := ka.Wait(wctx); err != nil || kres.ExitCode != 137 {
		t.Errorf("the KeepAlive process after the attack: exit %d %v", kres.ExitCode, err)
	}
}

// marked counts the processes in inst whose command line holds mark,
// as the sandbox sees them.
func marked(t *testing.T, inst sandbox.Instance, mark string) int {
	t.Helper()
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", `
import os, sys
n = 0
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            n += sys.argv[1].encode() in open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            pass
print(n)`, mark}})
	var n int
	if _, err := fmt.Sscan(res.Stdout, &n); err != nil {
		t.Fatalf("counting processes: %q %q", res.Stdout, res.Stderr)
	}
	return n
}

// testMounts checks that the folders the code writes and its inputs are
// noexec, nosuid and nodev (probes/mounts.py): the image's /bin/true,
// copied by the code into /tmp and by the host into /workspace/input,
// must not run from there.
func (s *suite) testMounts(t *testing.T) {
	inst := s.create(t, Policy(t, nil))
	ctx := context.Background()
	sh(t, inst, "cp /bin/true /tmp/true-for-input")
	r, _, err := inst.Files().Get(ctx, "/tmp/true-for-input")
	if err != nil {
		t.Fatal(err)
	}
	_, err = inst.Files().Put(ctx, "/workspace/input/true", r, 0)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	s.probe(t, inst, "mounts", map[string]string{"INPUT_TRUE": "/workspace/input/true"})
}
