package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// killGrace bounds how long a killed command may take to end, and a sweep
// to finish, before the whole sandbox is torn down instead.
const killGrace = 5 * time.Second

// Exec runs one command as the sandbox user and waits for it.
func (i *instance) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	res := sandbox.Result{ID: i.id, Backend: i.backend.Name(), Weakened: i.weakened,
		Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	spec, err := command.Check(i.policy, req, i.imageEnv, i.proxyEnv)
	if err != nil {
		return res, err
	}
	err = i.gate.Run(func() error { return i.run(ctx, req, spec, &res) }, i.sweep)
	if err != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		err = i.afterFailure(&res, err)
	}
	return res, err
}

// afterFailure handles a command whose run or cleanup failed. If the
// container itself ended, which is how gVisor meets the memory cap (the
// host's OOM killer ends the sentry), the sandbox is destroyed, and an
// OOM is reported as the command's fate rather than as an error.
func (i *instance) afterFailure(res *sandbox.Result, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	st, ierr := i.cli.ContainerInspect(ctx, i.cid)
	cancel()
	if ierr == nil && st.State != nil && st.State.Running {
		_ = i.Destroy(context.Background())
		return fmt.Errorf("%w; sandbox destroyed: %w", err, sandbox.ErrDestroyed)
	}
	oom := ierr == nil && st.State != nil && st.State.OOMKilled
	_ = i.Destroy(context.Background())
	if oom {
		res.OOMKilled, res.ExitCode, res.Signal = true, sandbox.ExitOOM, "SIGKILL"
		return nil
	}
	return fmt.Errorf("the sandbox's container ended during the command (%v): %w", err, sandbox.ErrDestroyed)
}

// run starts the command, streams its output into capped buffers, kills
// it at its timeout, and fills res.
func (i *instance) run(ctx context.Context, req sandbox.ExecRequest, spec command.Spec, res *sandbox.Result) error {
	usage := cgstat.Begin(i.cg)
	egressMark := i.proxy.Cursor()
	lim := i.policy.Limits
	stdout := command.NewCapBuffer(lim.OutputBytes, req.Stdout)
	stderr := command.NewCapBuffer(lim.OutputBytes, req.Stderr)
	start := time.Now()
	opts := i.reaper.wrapOptions()
	e, err := i.startExec(ctx, command.Wrap(spec, opts), spec.Env, spec.Dir, req.Stdin != nil)
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	defer e.close()
	e.markPID = opts.MarkPID
	done := e.pump(stdout, stderr, req.Stdin)
	sctx, cancel := context.WithTimeout(ctx, killGrace)
	err = i.reaper.started(sctx, e)
	cancel()
	if err != nil {
		_ = i.kill(e, done)
		return fmt.Errorf("start command: %w", err)
	}
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var waitErr error
	killed := false
	select {
	case <-done:
	case <-i.ended:
		return errEnded
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
		res.ExitCode, res.Signal = command.ExitKilled, "SIGKILL"
	default:
		code, err := i.exitCode(e.id)
		if err != nil {
			return err
		}
		res.ExitCode, res.Signal = code, command.SignalOf(code)
	}
	usage.Fill(res)
	if res.OOMKilled && i.backend.opts.Runtime == RuntimeRunsc {
		// The host meets the memory cap by killing gVisor's sentry, the
		// sandbox's kernel: the command and the sandbox are gone.
		res.ExitCode, res.Signal = sandbox.ExitOOM, "SIGKILL"
		_ = i.Destroy(context.Background())
	}
	res.Egress = append(res.Egress, i.proxy.Since(egressMark)...)
	return waitErr
}

// errEnded says the container stopped while a command ran.
var errEnded = errors.New("the sandbox's container stopped")

// execution is one exec of the daemon, attached.
type execution struct {
	id string
	hj types.HijackedResponse
	// markPID says the command prints its pid first, which pid takes.
	markPID bool
	pid     *command.PIDLine
	// done is closed when the output ends (set by pump).
	done chan struct{}
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
	e.done = done
	if e.markPID {
		e.pid = command.NewPIDLine(stdout)
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
	swept, err := i.gate.Alone(func() error { return i.reaper.sweep(ctx) })
	if !swept {
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
