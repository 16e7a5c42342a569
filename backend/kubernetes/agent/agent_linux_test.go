package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is the agent too: run with an agent command as its
// first argument, it is one (the shepherd executes itself as "exec").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		os.Exit(Main(os.Args))
	}
	os.Exit(m.Run())
}

// shepherdRun is one run of the shepherd, driven through its frames.
type shepherdRun struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    io.Reader
	stdout bytes.Buffer
	stderr bytes.Buffer
	pid    int
	exit   *Exit
}

func startShepherd(t *testing.T, spec RunSpec) *shepherdRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if spec.Env == nil {
		spec.Env = []string{"PATH=/usr/bin:/bin"}
	}
	if spec.Dir == "" {
		spec.Dir = "/"
	}
	if spec.Keep == 0 {
		spec.Keep = 1 << 20
	}
	r := &shepherdRun{cmd: exec.Command(self, CmdRun)}
	if r.in, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if r.out, err = r.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = os.Stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.in.Close()
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	})
	if err := WriteJSON(r.in, FrameSpec, spec); err != nil {
		t.Fatal(err)
	}
	kind, b, err := ReadFrame(r.out)
	if err != nil || kind != FrameStarted {
		t.Fatalf("first frame %q %v", kind, err)
	}
	var st Started
	if err := json.Unmarshal(b, &st); err != nil || st.Error != "" {
		t.Fatalf("started: %s %v", b, err)
	}
	r.pid = st.PID
	return r
}

// wait reads frames until the exit.
func (r *shepherdRun) wait(t *testing.T) *Exit {
	t.Helper()
	for r.exit == nil {
		kind, b, err := ReadFrame(r.out)
		if err != nil {
			t.Fatalf("frames ended before the exit: %v", err)
		}
		switch kind {
		case FrameStdout:
			r.stdout.Write(b)
		case FrameStderr:
			r.stderr.Write(b)
		case FrameExit:
			r.exit = &Exit{}
			if err := json.Unmarshal(b, r.exit); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r.exit
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func TestShepherdRunsAndSweeps(t *testing.T) {
	r := startShepherd(t, RunSpec{Argv: []string{"sh", "-c", "echo out; echo err >&2; sleep 300 & echo $!; setsid sleep 301 & exit 3"}})
	exit := r.wait(t)
	if exit.Code != 3 || exit.Signal != "" || r.stderr.String() != "err\n" {
		t.Fatalf("exit %+v stderr %q", exit, r.stderr.String())
	}
	lines := strings.Fields(r.stdout.String())
	if len(lines) != 2 || lines[0] != "out" {
		t.Fatalf("stdout %q", r.stdout.String())
	}
	left, _ := strconv.Atoi(lines[1])
	if alive(left) {
		t.Errorf("the process's background sleep %d outlived it", left)
	}
	if exit.Swept < 2 {
		t.Errorf("swept %d processes, want the two sleeps", exit.Swept)
	}
}

func TestShepherdMissingProgram(t *testing.T) {
	r := startShepherd(t, RunSpec{Argv: []string{"no-such-program-xyz"}})
	if exit := r.wait(t); exit.Code != 127 || !strings.Contains(r.stderr.String(), "not found") {
		t.Fatalf("exit %+v stderr %q", exit, r.stderr.String())
	}
	r = startShepherd(t, RunSpec{Argv: []string{"/etc/passwd"}})
	if exit := r.wait(t); exit.Code != 126 {
		t.Fatalf("not executable: exit %+v stderr %q", exit, r.stderr.String())
	}
}

func TestShepherdTimeoutAndSignals(t *testing.T) {
	start := time.Now()
	r := startShepherd(t, RunSpec{Argv: []string{"sh", "-c", "trap '' TERM; sleep 60"}, Timeout: int64(300 * time.Millisecond)})
	if exit := r.wait(t); !exit.TimedOut || exit.Signal != "SIGKILL" || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: %+v after %v", exit, time.Since(start))
	}
	r = startShepherd(t, RunSpec{Argv: []string{"sleep", "60"}})
	if err := WriteFrame(r.in, FrameSignal, []byte{byte(syscall.SIGTERM)}); err != nil {
		t.Fatal(err)
	}
	if exit := r.wait(t); exit.Code != 143 || exit.Signal != "SIGTERM" {
		t.Fatalf("SIGTERM: %+v", exit)
	}
}

func TestShepherdStdinAndCaps(t *testing.T) {
	r := startShepherd(t, RunSpec{Argv: []string{"cat"}, Stdin: true})
	_ = WriteFrame(r.in, FrameStdin, []byte("ping\n"))
	_ = WriteFrame(r.in, FrameEOF, nil)
	if exit := r.wait(t); exit.Code != 0 || r.stdout.String() != "ping\n" {
		t.Fatalf("cat: %+v %q", exit, r.stdout.String())
	}
	r = startShepherd(t, RunSpec{Argv: []string{"head", "-c", "1000000", "/dev/zero"}, Keep: 1000})
	if exit := r.wait(t); r.stdout.Len() != 1000 || exit.StdoutBytes != 1000000 {
		t.Fatalf("kept %d of %d", r.stdout.Len(), exit.StdoutBytes)
	}
}

// TestShepherdEndsWithItsStream: when the backend's stream ends, the
// process dies with everything it started.
func TestShepherdEndsWithItsStream(t *testing.T) {
	r := startShepherd(t, RunSpec{Argv: []string{"sh", "-c", "sleep 300 & echo $!; wait"}})
	kind, b, err := ReadFrame(r.out)
	if err != nil || kind != FrameStdout {
		t.Fatalf("%q %v", kind, err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	r.in.Close()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shepherd did not end with its stream")
	}
	if alive(r.pid) || alive(child) {
		t.Errorf("the process %d or its child %d outlived the stream", r.pid, child)
	}
}
