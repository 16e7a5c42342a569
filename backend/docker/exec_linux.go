package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"
)

// killGrace bounds how long a killed command may take to end, and a sweep
// to finish, before the whole sandbox is torn down instead.
const killGrace = 5 * time.Second

// Exec runs one command as the sandbox user and waits for it.
func (i *instance) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	res := sandbox.Result{ID: i.id, Backend: i.backend.Name(), Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	spec, err := command.Check(i.policy, req, i.proxyEnv)
	if err != nil {
		return res, err
	}
	if err := i.enter(); err != nil {
		return res, err
	}
	err = i.run(ctx, req, spec, &res)
	if lerr := i.leave(); err == nil {
		err = lerr
	}
	return res, err
}

// run starts the command, streams its output into capped buffers, kills
// it at its timeout, and fills res.
func (i *instance) run(ctx context.Context, req sandbox.ExecRequest, spec command.Spec, res *sandbox.Result) error {
	var before cgstat.Stats
	if i.cg != nil {
		i.cg.ResetPeak()
		before = i.cg.Stats()
	}
	seenEgress := 0
	if i.proxy != nil {
		seenEgress = len(i.proxy.Events())
	}
	lim := i.policy.Limits
	stdout := command.NewCapBuffer(lim.OutputBytes, req.Stdout)
	stderr := command.NewCapBuffer(lim.OutputBytes, req.Stderr)
	start := time.Now()
	markPID := i.reaper.needsPID()
	e, err := i.startExec(ctx, wrap(spec, markPID), spec.Env, spec.Dir, req.Stdin != nil)
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	defer e.close()
	if markPID {
		e.pid = &pidLine{}
	}
	done := e.pump(stdout, stderr, req.Stdin)
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var waitErr error
	killed := false
	select {
	case <-done:
	case <-timer.C:
		res.TimedOut = true
		waitErr = i.kill(e, done)
	case <-ctx.Done():
		killed = true
		if waitErr = i.kill(e, done); waitErr == nil {
			waitErr = ctx.Err()
		}
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	res.Stdout, res.StdoutTruncated = stdout.String(), stdout.Truncated()
	res.Stderr, res.StderrTruncated = stderr.String(), stderr.Truncated()
	switch {
	case res.TimedOut:
		res.ExitCode, res.Signal = sandbox.ExitTimeout, "SIGKILL"
	case killed:
		res.ExitCode, res.Signal = 128+int(unix.SIGKILL), "SIGKILL"
	default:
		code, err := i.exitCode(e.id)
		if err != nil {
			return err
		}
		res.ExitCode, res.Signal = code, command.SignalOf(code)
	}
	i.fillUsage(res, before)
	if i.proxy != nil {
		res.Egress = append(res.Egress, i.proxy.Events()[seenEgress:]...)
	}
	return waitErr
}

// fillUsage reads the container's cgroup counters into res.
func (i *instance) fillUsage(res *sandbox.Result, before cgstat.Stats) {
	if i.cg == nil {
		return
	}
	after := i.cg.Stats()
	if after.HasCPU {
		res.Usage.CPUMillis = float64(after.CPUNanos-before.CPUNanos) / 1e6
	}
	if after.HasPeak {
		res.Usage.PeakMemoryBytes = after.PeakBytes
	}
	res.OOMKilled = after.OOMKills > before.OOMKills
	res.PidsLimitHit = after.PidsMax > before.PidsMax
}

// wrap runs argv through the image's sh, which first removes the
// variables that Docker and sh add on their own (HOSTNAME, PWD) unless
// the command asked for them. With markPID it prints its pid, which stays
// the command's after exec, on a line of its own. sh reports a missing
// program (127) and one that cannot run (126) the way a shell user
// expects.
func wrap(spec command.Spec, markPID bool) []string {
	script := ""
	if markPID {
		script += `printf '` + pidMarker + `%d\n' "$$"; `
	}
	for _, name := range []string{"HOSTNAME", "PWD"} {
		if !slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) {
			script += "unset " + name + "; "
		}
	}
	script += `exec "$@"`
	return append([]string{"/bin/sh", "-c", script, "sh"}, spec.Argv...)
}

// execution is one exec of the daemon, attached.
type execution struct {
	id  string
	hj  types.HijackedResponse
	pid *pidLine // nil unless the command prints its pid first
}

// startExec creates and starts an exec as the sandbox user, attached to
// its stdout and stderr, and to its stdin when withStdin is set.
func (i *instance) startExec(ctx context.Context, argv, env []string, dir string, withStdin bool) (*execution, error) {
	created, err := i.cli.ContainerExecCreate(ctx, i.cid, container.ExecOptions{
		User: sandboxUser, AttachStdin: withStdin, AttachStdout: true, AttachStderr: true,
		Env: env, WorkingDir: dir, Cmd: argv,
	})
	if err != nil {
		return nil, err
	}
	hj, err := i.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, err
	}
	return &execution{id: created.ID, hj: hj}, nil
}

// pump copies the demultiplexed output into stdout and stderr and feeds
// stdin; the channel closes when the output ends.
func (e *execution) pump(stdout, stderr io.Writer, stdin io.Reader) <-chan struct{} {
	done := make(chan struct{})
	if e.pid != nil {
		e.pid.next = stdout
		stdout = e.pid
	}
	go func() {
		defer close(done)
		_, _ = stdcopy.StdCopy(stdout, stderr, e.hj.Reader)
	}()
	if stdin != nil {
		go func() {
			_, _ = io.Copy(e.hj.Conn, stdin)
			_ = e.hj.CloseWrite()
		}()
	}
	return done
}

func (e *execution) close() { e.hj.Close() }

// exitCode asks the daemon for the exit status of a finished exec. The
// output may end a moment before the daemon has recorded the exit.
func (i *instance) exitCode(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	for {
		st, err := i.cli.ContainerExecInspect(ctx, id)
		if err != nil {
			return 0, fmt.Errorf("exit status: %w", err)
		}
		if !st.Running {
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("exit status: the command's output ended but it still runs")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// kill kills a command that ran out of time (alone, everything of the
// sandbox user; else the command's session) and waits for its output to
// end. If it does not, the sandbox is destroyed.
func (i *instance) kill(e *execution, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	i.mu.Lock()
	alone := i.running == 1 && !i.sweeping
	if alone {
		i.sweeping = true
	}
	i.mu.Unlock()
	var err error
	if alone {
		err = i.reaper.sweep(ctx)
		i.mu.Lock()
		i.sweeping = false
		i.idle.Broadcast()
		i.mu.Unlock()
	} else {
		err = i.reaper.killExec(ctx, e)
	}
	if err == nil {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
		}
	}
	_ = i.Destroy(context.Background())
	e.close()
	<-done
	return fmt.Errorf("command could not be killed (%v); sandbox destroyed: %w", err, sandbox.ErrDestroyed)
}

// pidMarker starts the line on which a command prints its pid. Nothing
// the command prints can come before it.
const pidMarker = "airlock-pid "

// pidLine takes the first line of a command's stdout when it carries the
// pid marker, and passes everything else on.
type pidLine struct {
	mu   sync.Mutex
	next io.Writer
	head []byte
	done bool
	pid  int
}

func (p *pidLine) Write(b []byte) (int, error) {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return p.next.Write(b)
	}
	n := len(b)
	p.head = append(p.head, b...)
	nl := bytes.IndexByte(p.head, '\n')
	if nl < 0 && len(p.head) < 64 {
		p.mu.Unlock()
		return n, nil
	}
	p.done = true
	rest := p.head
	if nl >= 0 && bytes.HasPrefix(p.head, []byte(pidMarker)) {
		p.pid, _ = strconv.Atoi(string(p.head[len(pidMarker):nl]))
		rest = p.head[nl+1:]
	}
	p.head = nil
	p.mu.Unlock()
	if len(rest) > 0 {
		_, _ = p.next.Write(rest)
	}
	return n, nil
}

// get returns the pid once its line was read, else 0.
func (p *pidLine) get() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}
