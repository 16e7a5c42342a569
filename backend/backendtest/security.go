//go:build linux

package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// security runs the attack suite of SECURITY-SUITE.md.
func (s *suite) security(t *testing.T) {
	t.Run("filesystem", s.testFilesystemAttacks)
	t.Run("mount flags", s.testMounts)
	t.Run("network", s.testNetworkAttacks)
	t.Run("egress allowlist", s.testEgress)
	t.Run("privileges", s.testPrivilegeAttacks)
	t.Run("landlock", s.testLandlock)
	t.Run("isolation between sandboxes", s.testIsolation)
	t.Run("fork bomb", s.testForkBomb)
	t.Run("stdout flood", s.testFlood)
	t.Run("leftover processes", s.testLeftovers)
	t.Run("the next command always works", s.testNextCommand)
	t.Run("attacks on the host's channels", s.testChannelAttack)
	t.Run("many runs", s.testManyRuns)
	t.Run("artifacts", s.testArtifacts)
}

func randomMark(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "airlockmark" + hex.EncodeToString(b[:])
}

func (s *suite) testFilesystemAttacks(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(dir, "canary-secret")
	if err := os.WriteFile(canary, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Policy(t, func(p *sandbox.Policy) { p.Limits.DiskBytes = 32 << 20; p.Limits.DiskInodes = 2000 })
	inst := s.create(t, p)
	env := map[string]string{
		"CANARY":      canary,
		"DISK_BYTES":  strconv.FormatInt(p.Limits.DiskBytes, 10),
		"DISK_INODES": strconv.FormatInt(p.Limits.DiskInodes, 10),
		"STDIO_DIR":   s.StdioDir,
	}
	if _, ok := s.Skip["inodes stop at the cap"]; ok {
		// no cap to meet: the fill would run to the probe's own bound
		env["INODE_FILL"] = "no"
	}
	s.probe(t, inst, "filesystem", env)
	if b, err := os.ReadFile(canary); err != nil || string(b) != "host secret" {
		t.Errorf("host canary changed: %q %v", b, err)
	}
}

func (s *suite) testNetworkAttacks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	mark := randomMark(t)
	abs, err := net.Listen("unix", "@"+mark)
	if err != nil {
		t.Fatal(err)
	}
	defer abs.Close()
	var absAccepted atomic.Int32
	go func() {
		for {
			c, err := abs.Accept()
			if err != nil {
				return
			}
			absAccepted.Add(1)
			c.Close()
		}
	}()
	inst := s.create(t, Policy(t, nil))
	port := ln.Addr().(*net.TCPAddr).Port
	s.probe(t, inst, "network", map[string]string{"HOST_PORT": strconv.Itoa(port), "ABSTRACT": mark})
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's loopback listener accepted %d connections from the sandbox", n)
	}
	if n := absAccepted.Load(); n != 0 {
		t.Errorf("the host's abstract socket accepted %d connections from the sandbox", n)
	}
}

func (s *suite) testPrivilegeAttacks(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testenv.Require(t, "an x86_64 host (the privilege probe uses its system call numbers)", fmt.Errorf("this is %s", runtime.GOARCH))
	}
	inst := s.create(t, Policy(t, nil))
	s.probe(t, inst, "privileges", map[string]string{"AIRLOCK_PROBE_ENOSYS": strings.Join(s.FilterENOSYS, ",")})
}

func (s *suite) testIsolation(t *testing.T) {
	mark := randomMark(t)
	env := map[string]string{"MARK": mark, "SHM_KEY": "424242", "HOLD": "60"}
	a := s.create(t, Policy(t, nil))
	b := s.create(t, Policy(t, nil))
	if line := StartHolder(t, a, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", probeScript(t, "holder"), mark}, Env: env}, 60*time.Second); !strings.Contains(line, `"ok": true`) {
		t.Fatalf("holder sandbox not ready: %s", line)
	}
	s.probe(t, b, "isolation", env)
}

func (s *suite) testForkBomb(t *testing.T) {
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) {
		p.Limits.Pids = 64
		p.Limits.Timeout = sandbox.Duration(20 * time.Second)
	}))
	start := time.Now()
	res := sh(t, inst, "bomb() { bomb | bomb & }; bomb; sleep 3")
	// the host stays responsive: a trivial command runs at once
	t0 := time.Now()
	out, err := execHost("true")
	if err != nil || time.Since(t0) > 2*time.Second {
		t.Errorf("host command during the fork bomb: %v %q in %v", err, out, time.Since(t0))
	}
	if !res.PidsLimitHit && !s.skipped(t, "pids_limit_hit reported") {
		t.Errorf("fork bomb: pids_limit_hit not reported (exit %d, %.0f ms)", res.ExitCode, res.DurationMS)
	}
	// what may remain of the sandbox user's: the check, and the shell a
	// backend may run the check under (a backend's own processes run as
	// other users, or run AgentExe); a zombie counts
	after := Exec(t, inst, sandbox.ProcessSpec{Env: map[string]string{"AGENT_EXE": s.AgentExe}, Cmd: []string{"python3", "-c", `
import os, sys
agent = os.environ["AGENT_EXE"]
n = 0
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) not in (os.getpid(), os.getppid()):
        try:
            if os.stat("/proc/" + p).st_uid != os.getuid():
                continue
        except OSError:
            continue  # gone
        try:
            # its command line: the agent makes itself undumpable, which
            # hides its exe link; a zombie's is empty, and counts
            with open("/proc/" + p + "/cmdline", "rb") as f:
                if agent and f.read().split(b"\0")[0] == agent.encode():
                    continue
        except OSError:
            pass
        n += 1
        try:
            with open("/proc/" + p + "/stat") as f:
                print(f.read()[:120].strip(), file=sys.stderr)  # pid (comm) state ppid pgrp session
        except OSError:
            pass
print(n)`}})
	if n, err := strconv.Atoi(strings.TrimSpace(after.Stdout)); err != nil || n > 0 {
		t.Errorf("%d processes still in the sandbox after the fork bomb's command ended (%q), their stat lines:\n%s", n, after.Stdout, after.Stderr)
	}
	t.Logf("fork bomb held at the pids cap for %v", time.Since(start))
}

func (s *suite) testFlood(t *testing.T) {
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.Timeout = sandbox.Duration(2 * time.Minute) }))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// 256 times the output cap (1 MiB) on stdout, 64 times on stderr:
	// enough to show the cap holds, and within the timeout on gVisor,
	// whose pipes are slow (1.25 GiB did not fit in 2 minutes here)
	res := sh(t, inst, "head -c 268435456 /dev/zero; head -c 67108864 /dev/zero >&2")
	runtime.ReadMemStats(&after)
	if res.TimedOut || !res.StdoutTruncated || !res.StderrTruncated || len(res.Stdout) != 1<<20 {
		t.Errorf("flood: stdout %d bytes truncated %v, stderr truncated %v, timed out %v",
			len(res.Stdout), res.StdoutTruncated, res.StderrTruncated, res.TimedOut)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("supervisor heap grew by %d MiB while 320 MiB were printed", grew>>20)
	}
}

func (s *suite) testLeftovers(t *testing.T) {
	mark := randomMark(t)
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) { p.Limits.Timeout = s.scaled(2 * time.Second) }))
	// a daemon that double-forks, starts a new session and ignores SIGTERM
	daemon := fmt.Sprintf(`python3 -c '
import os, signal, time, sys
if os.fork(): sys.exit(0)
os.setsid()
if os.fork(): sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.closerange(0, 3)
time.sleep(600)
' %s`, mark)
	res := sh(t, inst, daemon+"; echo spawned")
	if res.Stdout != "spawned\n" {
		t.Fatalf("daemon launcher: %q %q", res.Stdout, res.Stderr)
	}
	if pids := hostProcesses(mark); len(pids) > 0 {
		t.Errorf("a daemon outlived its command: host pids %v", pids)
	}
	res = sh(t, inst, daemon+"; sleep 60")
	if !res.TimedOut {
		t.Errorf("command with a daemon did not time out: %+v", res)
	}
	if pids := hostProcesses(mark); len(pids) > 0 {
		t.Errorf("a daemon outlived its command's timeout: host pids %v", pids)
	}
}

func (s *suite) testManyRuns(t *testing.T) {
	runs := s.ManyRuns
	if runs <= 0 {
		runs = 20
	}
	for k := range runs {
		p := Policy(t, nil)
		inst, err := s.Backend.Create(context.Background(), sandbox.Spec{Image: s.Image, Policy: p})
		if err != nil {
			t.Fatalf("run %d: %v", k, err)
		}
		res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", "echo run; sleep 0.01 &"}})
		if err != nil || res.Stdout != "run\n" {
			t.Errorf("run %d: %q %v", k, res.Stdout, err)
		}
		if err := inst.Destroy(context.Background()); err != nil {
			t.Errorf("run %d destroy: %v", k, err)
		}
	}
	if s.Leftovers != nil {
		if left := s.Leftovers(); len(left) > 0 {
			t.Errorf("after %d runs, left behind: %v", runs, left)
		}
	}
}

// hostProcesses lists host pids whose command line contains mark.
func hostProcesses(mark string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), mark) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// readBeneath reads a file under dir without following any link.
func readBeneath(dir *os.File, rel string) ([]byte, error) {
	fd, err := unix.Openat2(int(dir.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	return io.ReadAll(f)
}
