package backendtest

import (
	"bufio"
	"os"
	"os/exec"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
)

// Child is the test binary started again, in a mode of the test's own
// that its TestMain recognises from env, to hold a sandbox and be killed
// as a crashed airlock process would be.
type Child struct {
	// Line is the first line the child printed ("" if none).
	Line string
	// Pid and Owner identify the child as the backends name their
	// sandboxes' traces (hostdir's PID-START).
	Pid   int
	Owner string
	cmd   *exec.Cmd
}

// StartChild runs the test binary with no tests and env added to the
// environment, and waits for its first line. It is killed when the test
// ends if Kill was not called.
func StartChild(t *testing.T, env ...string) *Child {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{Pid: cmd.Process.Pid, Owner: hostdir.OwnerOf(cmd.Process.Pid), cmd: cmd}
	t.Cleanup(c.Kill)
	c.Line, _ = bufio.NewReader(out).ReadString('\n')
	return c
}

// Kill kills the child with SIGKILL and waits for it. It is idempotent.
func (c *Child) Kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}
