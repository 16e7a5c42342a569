package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// netns is a network namespace with only lo (up), held open by a sleeping
// process, as the native backend's sandboxes have.
type netns struct {
	pid  int
	path string
}

// newNetns makes a namespace, or skips the test with the reason.
func newNetns(t *testing.T) *netns {
	t.Helper()
	testenv.Require(t, "root, to create a network namespace", testenv.Root())
	for _, tool := range []string{"unshare", "nsenter", "ip", "python3"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, tool+", for the in-namespace attack scripts", err)
	}
	cmd := exec.Command("unshare", "--net", "--", "sleep", "600")
	testenv.Require(t, "a network namespace", cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	n := &netns{pid: cmd.Process.Pid, path: fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)}
	// unshare execs sleep once the namespace exists; wait for that.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		self, _ := os.Readlink("/proc/self/ns/net")
		if other, err := os.Readlink(n.path); err == nil && other != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace did not appear")
		}
	}
	if out, err := exec.Command("nsenter", "--net="+n.path, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v %s", err, out)
	}
	return n
}

// listen opens a TCP listener on 127.0.0.1 inside the namespace, the way
// airlock hands the proxy its socket. The calling thread enters the
// namespace and returns; if it cannot return, it is left locked so that
// the runtime retires it.
func (n *netns) listen(t *testing.T) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer unix.Close(home)
		target, err := unix.Open(n.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{l, lerr}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listening inside the namespace: %v", r.err)
	}
	return r.l
}

// attackResult is the line each attack script prints.
type attackResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail any    `json:"detail"`
}

// TestAttackScripts runs every script of backend/backendtest/probes/egress inside a network
// namespace with only lo, against a proxy whose listener lives there, as
// in a sandbox. Every script must report ok.
func TestAttackScripts(t *testing.T) {
	n := newNetns(t)
	f := newFixtureOn(t, sandbox.NetworkPolicy{}, n.listen(t))
	_, httpsPort, _ := net.SplitHostPort(f.https.Listener.Addr().String())
	_, httpPort, _ := net.SplitHostPort(f.http.Listener.Addr().String())
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "PYTHONDONTWRITEBYTECODE=1",
		"ATTACK_HTTPS_URL=https://api.allowed.test/hello", "ATTACK_HTTP_URL=http://api.allowed.test/hello",
		"ATTACK_CAFILE=" + f.ca.pemFile(t), "ATTACK_DENIED_HOST=denied.test",
		"ATTACK_HOST_PORTS=" + httpsPort + "," + httpPort}
	for k, v := range Env(f.addr) {
		env = append(env, k+"="+v)
	}
	scripts, err := filepath.Glob("../backend/backendtest/probes/egress/*.py")
	if err != nil || len(scripts) < 10 {
		t.Fatalf("attack scripts: %v %v", scripts, err)
	}
	python, _ := exec.LookPath("python3")
	for _, script := range scripts {
		if filepath.Base(script) == "attacklib.py" {
			continue
		}
		abs, _ := filepath.Abs(script)
		cmd := exec.Command("nsenter", "--net="+n.path, python, abs)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var r attackResult
		if err != nil || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r) != nil {
			t.Errorf("%s: %v; want one JSON line, got %q, stderr %s", script, err, out, stderr.String())
			continue
		}
		t.Logf("%s: %s", script, lines[0])
		if !r.OK {
			t.Errorf("%s: attack not stopped (or allowed request failed): %v", r.Name, r.Detail)
		}
	}
	// Control: on the host itself, outside the namespace, the same script
	// must see the origin servers on the host's loopback, so that its
	// "ok" inside means something.
	abs, _ := filepath.Abs("../backend/backendtest/probes/egress/direct_host_loopback.py")
	cmd := exec.Command(python, abs)
	cmd.Env = env
	out, err := cmd.Output()
	var r attackResult
	if err != nil || json.Unmarshal(out, &r) != nil || r.OK {
		t.Errorf("control run of direct_host_loopback.py on the host: %v %s; want ok false", err, out)
	}
}
