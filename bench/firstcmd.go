package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// FirstCommand is the independent sandbox benchmarks' measure: the time
// from the create call until `node -v` has returned its output, in a
// fresh sandbox. The sandbox is destroyed after, untimed.
type FirstCommand interface {
	// Once creates a sandbox, runs node -v, and returns the time to its
	// output, then destroys the sandbox.
	Once(ctx context.Context) (time.Duration, error)
}

// nodeVersion is the command every target runs.
var nodeVersion = []string{"node", "-v"}

// checkNode checks node -v's answer.
func checkNode(res sandbox.Result) error {
	if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "v") {
		return fmt.Errorf("node -v: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return nil
}

// HTTPTarget measures through airlock serve's HTTP API, with the SDK.
type HTTPTarget struct{ C *client.Client }

// Once implements FirstCommand.
func (h HTTPTarget) Once(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	s, err := h.C.CreateSession(ctx, api.CreateSession{})
	if err != nil {
		return 0, err
	}
	res, err := h.C.Exec(ctx, s.ID, api.Exec{Cmd: nodeVersion})
	d := time.Since(start)
	derr := h.C.DeleteSession(context.WithoutCancel(ctx), s.ID)
	if err == nil {
		err = checkNode(res)
	}
	return d, errors.Join(err, derr)
}

// ManagerTarget measures through a session Manager in this process: what
// airlock serve does for the same calls, less HTTP.
type ManagerTarget struct{ M *session.Manager }

// Once implements FirstCommand.
func (m ManagerTarget) Once(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	s, err := m.M.Create(ctx, session.CreateOptions{Owner: "bench"})
	if err != nil {
		return 0, err
	}
	res, err := s.Exec(ctx, sandbox.ProcessSpec{Cmd: nodeVersion})
	d := time.Since(start)
	derr := s.Destroy(context.WithoutCancel(ctx))
	if err == nil {
		err = checkNode(res)
	}
	return d, errors.Join(err, derr)
}

// Sequential runs n measures one after the other.
func Sequential(ctx context.Context, t FirstCommand, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		d, err := t.Once(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Burst starts n measures at once (released together from a barrier) and
// returns each one's time from its create call to its output.
func Burst(ctx context.Context, t FirstCommand, n int) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			out[i], errs[i] = t.Once(ctx)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return out, errors.Join(errs...)
}

// Server is an airlock serve process started for a benchmark.
type Server struct {
	URL  string
	cmd  *exec.Cmd
	logs bytes.Buffer
}

// StartServer starts bin serve on a free loopback port with args, without
// keys and with no rate limit to speak of, and waits until it answers.
func StartServer(bin string, args ...string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{URL: "http://" + addr}
	s.cmd = exec.Command(bin, append([]string{"serve", "--addr", addr, "--rate", "1000000", "--rate-burst", "1000000",
		"--tenant-sessions", "1000", "--tenant-cpus", "1000", "--tenant-memory", "1TiB"}, args...)...)
	s.cmd.Stderr = &limited{w: &s.logs, n: 1 << 20}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("airlock serve did not answer: %v\n%s", err, s.logs.String())
		}
	}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop ends the server with SIGTERM and waits for it.
func (s *Server) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	return s.cmd.Wait()
}

// Sandboxes counts the sandbox init processes whose parent is pid: the
// sandboxes an airlock process holds, pooled ones included.
func Sandboxes(pid int) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix(b, []byte("airlock-sandbox-init")) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		s := string(st)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				n++
			}
		}
	}
	return n
}

// WaitFor waits until ok holds, or d passes.
func WaitFor(d time.Duration, ok func() bool) error {
	for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v", d)
		}
	}
	return nil
}

// Hosted are the published medians of the hosted sandboxes, in ms, from
// the independent benchmarks: sequential (fastest first) and a burst of
// 100.
var (
	HostedSequential = []float64{42, 186, 491}
	HostedBurst      = []float64{351, 367, 822}
)

// Targets of this project, in ms: the medians to beat.
const (
	TargetSequentialMs = 15
	TargetBurstMs      = 300
)
