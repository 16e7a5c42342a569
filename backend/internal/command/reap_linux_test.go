package command

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reapUID is the user the reap tests run their processes as: no account
// of this host uses it.
const reapUID = 42421

// asUser starts argv as reapUID, in a session of its own when setsid,
// and reaps it when it ends, as a sandbox's pid 1 would.
func asUser(t *testing.T, setsid bool, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: reapUID, Gid: reapUID}, Setsid: setsid}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited })
	return cmd
}

// userProcs lists the processes of reapUID, zombies too.
func userProcs() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		if strings.Contains(string(b), fmt.Sprintf("\nUid:\t%d\t", reapUID)) {
			out = append(out, pid)
		}
	}
	return out
}

func reap(t *testing.T, keep ...int) {
	t.Helper()
	args := ReapArgs(reapUID, 0, keep)
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("reap: %v %s", err, out)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b[strings.LastIndexByte(string(b), ')'):]), ") Z")
}

// TestReapSparesTrees runs ReapScript on the host's processes: what a
// spared process started lives on, the rest dies, names forged to look
// like another user's or another parent's included.
func TestReapSparesTrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs processes as another user, which needs root")
	}
	// t.TempDir's parent is private to root; the user must reach this one
	dir, err := os.MkdirTemp("", "reap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// names a process gets from its program's file name: a newline and
	// a status line, a ") " and stat fields
	forged := []string{"x\nUid:\t0\n", "a) S 1 1 1 1"}
	var forgers []string
	for _, name := range forged {
		p := filepath.Join(dir, name)
		if err := os.Symlink("/bin/sleep", p); err != nil {
			t.Fatal(err)
		}
		forgers = append(forgers, p)
	}
	kept := asUser(t, true, "sh", "-c", "sleep 300 & sleep 301 & wait")
	leftover := asUser(t, true, "sleep", "302")
	lone := asUser(t, false, forgers[0], "303")
	other := asUser(t, true, forgers[1], "304")
	for deadline := time.Now().Add(5 * time.Second); len(userProcs()) < 6; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the test's processes did not start: %v", userProcs())
		}
	}
	reap(t, kept.Process.Pid)
	for _, c := range []*exec.Cmd{leftover, lone, other} {
		if alive(c.Process.Pid) {
			t.Errorf("process %d (%v) outside every spared tree survived", c.Process.Pid, c.Args)
		}
	}
	left := userProcs()
	if len(left) != 3 {
		t.Errorf("after the reap: %v, want the spared shell and its two children", left)
	}
	reap(t)
	if left := userProcs(); len(left) != 0 {
		t.Errorf("nothing spared: %v left", left)
	}
}

// TestReapForkBomb reaps a fork bomb held at an RLIMIT_NPROC of 64 (a
// loop that starts processes as fast as it can, each of which starts
// more): the reap stops and kills it, and waits until its zombies are
// reaped (unreaped, they would hold the user's count of processes). The
// bomb runs in a pid namespace whose pid 1, a root shell, reaps orphans
// as a sandbox's keeper does.
func TestReapForkBomb(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs processes as another user, which needs root")
	}
	uid := strconv.Itoa(reapUID)
	bomb := "prlimit --nproc=64 setpriv --reuid " + uid + " --regid " + uid + " --clear-groups sh -c 'while :; do sh -c \"sleep 1 & sleep 1\" & done' 2>/dev/null"
	cmd := exec.Command("unshare", "--pid", "--fork", "--kill-child", "sh", "-c", bomb+" & while :; do wait; sleep 0.01; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// unshare's child, and with it the namespace, dies with unshare
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	for deadline := time.Now().Add(10 * time.Second); len(userProcs()) < 32; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the fork bomb has %d processes", len(userProcs()))
		}
	}
	start := time.Now()
	reap(t)
	if left := userProcs(); len(left) != 0 {
		t.Errorf("after reaping a fork bomb: %d processes left", len(left))
	}
	t.Logf("fork bomb reaped in %v", time.Since(start))
}
