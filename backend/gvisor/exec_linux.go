package gvisor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Bounds on the end of a command. killGrace is how long a killed command
// may take to end, and a sweep to finish, before the sandbox is destroyed;
// holdGrace is how long output may stay open after the command ended
// before the sandbox is swept (something it started holds the output).
const (
	killGrace = 5 * time.Second
	holdGrace = 50 * time.Millisecond
)

// Exec runs one command as the sandbox user with runsc exec and waits
// for it.
func (i *instance) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	res := sandbox.Result{ID: i.id, Backend: i.backend.Name(), Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	spec, err := command.Check(i.policy, req, i.imageEnv, i.proxyEnv)
	if err != nil {
		return res, err
	}
	err = i.gate.Run(func() error { return i.run(ctx, req, spec, &res) }, i.sweep)
	if err != nil && !isCtxErr(ctx, err) {
		err = i.afterFailure(err)
	}
	return res, err
}

// run starts runsc exec with the command's stdio, sweeps through the
// command's shell when the command ends alone, kills it at its timeout,
// and fills res.
func (i *instance) run(ctx context.Context, req sandbox.ExecRequest, spec command.Spec, res *sandbox.Result) error {
	usage := cgstat.Begin(i.cg)
	egressMark := i.proxy.Cursor()
	lim := i.policy.Limits
	stdout := command.NewCapBuffer(lim.OutputBytes, req.Stdout)
	stderr := command.NewCapBuffer(lim.OutputBytes, req.Stderr)
	pidFile := filepath.Join(i.dir.Path(), "exec-"+strconv.Itoa(i.nextSeq())+".pid")
	defer os.Remove(pidFile)
	p, err := i.startExec(spec, pidFile, req.Stdin, stdout, stderr)
	if err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	defer p.closeControl()
	start := time.Now()
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var waitErr error
	killed := false
	select {
	case <-p.exited:
	case <-p.ended:
		waitErr = i.finish(p)
	case <-timer.C:
		res.TimedOut = true
		waitErr = i.kill(p, pidFile)
	case <-ctx.Done():
		killed = true
		if waitErr = i.kill(p, pidFile); waitErr == nil {
			waitErr = ctx.Err()
		}
	}
	i.drain(p)
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	res.Stdout, res.StdoutTruncated = stdout.String(), stdout.Truncated()
	res.Stderr, res.StderrTruncated = stderr.String(), stderr.Truncated()
	switch code := p.cmd.ProcessState.ExitCode(); {
	case res.TimedOut:
		res.ExitCode, res.Signal = sandbox.ExitTimeout, "SIGKILL"
	case killed || code < 0:
		res.ExitCode, res.Signal = command.ExitKilled, "SIGKILL"
	default:
		res.ExitCode, res.Signal = code, command.SignalOf(code)
	}
	usage.Fill(res)
	res.Egress = append(res.Egress, i.proxy.Since(egressMark)...)
	if res.OOMKilled {
		// The host meets the memory cap by killing the sentry, the
		// sandbox's kernel: the command and the sandbox are gone.
		res.ExitCode, res.Signal = sandbox.ExitOOM, "SIGKILL"
		_ = i.Destroy(context.Background())
		return nil
	}
	return waitErr
}

// finish answers a command's shell that said its command ended: if no
// other command runs, it sweeps; then the shell exits.
func (i *instance) finish(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	swept, err := i.gate.Alone(func() error { return p.sweep(ctx) })
	if !swept {
		err = p.tell(command.CtlSkip)
	}
	if err == nil {
		select {
		case <-p.exited:
			return nil
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = i.Destroy(context.Background())
	return fmt.Errorf("the command's shell did not finish (%v); sandbox destroyed: %w", err, sandbox.ErrDestroyed)
}

// process is one running runsc exec, the copies of its output, and the
// control pipes to its shell (see command.WrapOptions.Control).
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when runsc exec has been waited for
	copied sync.WaitGroup
	pipes  []*os.File // output, closed by drain

	toShell   *os.File
	fromShell chan string   // the shell's lines after "ended"
	ended     chan struct{} // closed when the shell says the command ended
}

// startExec starts runsc exec. The command's stdout and stderr are pipes
// that the sandbox writes into directly; stdin is a file passed as is, a
// pipe fed from r, or /dev/null. Two more pipes become the shell's
// descriptors 3 and 4.
func (i *instance) startExec(spec command.Spec, pidFile string, stdin io.Reader, stdout, stderr io.Writer) (*process, error) {
	args := []string{"exec", "--user", fmt.Sprintf("%d:%d", sandboxUID, sandboxGID), "--cwd", spec.Dir,
		"--internal-pid-file", pidFile, "--pass-fd", "3:3", "--pass-fd", "4:4"}
	for _, kv := range spec.Env {
		args = append(args, "--env", kv)
	}
	args = append(args, i.cid)
	args = append(args, command.Wrap(spec, command.WrapOptions{Control: true})...)
	cmd := exec.Command(i.backend.probe().runsc, append(slices.Clone(i.flags), args...)...)
	p := &process{cmd: cmd, exited: make(chan struct{}), fromShell: make(chan string, 2), ended: make(chan struct{})}
	var theirs []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	fail := func(err error) (*process, error) {
		p.closePipes()
		p.closeControl()
		return nil, err
	}
	in, feed, err := stdinFile(stdin)
	if err != nil {
		return fail(err)
	}
	theirs = append(theirs, in)
	cmd.Stdin = in
	for _, out := range []struct {
		dst io.Writer
		set *io.Writer
	}{{stdout, &cmd.Stdout}, {stderr, &cmd.Stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		theirs = append(theirs, w)
		p.pipes = append(p.pipes, r)
		*out.set = w
		p.copied.Add(1)
		go func(dst io.Writer) {
			defer p.copied.Done()
			_, _ = io.Copy(dst, r)
		}(out.dst)
	}
	ctlIn, toShell, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	p.toShell = toShell
	theirs = append(theirs, ctlIn)
	fromShell, ctlOut, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	theirs = append(theirs, ctlOut)
	cmd.ExtraFiles = []*os.File{ctlIn, ctlOut}
	if err := cmd.Start(); err != nil {
		fromShell.Close()
		if feed != nil {
			feed.Close()
		}
		return fail(err)
	}
	go p.listen(fromShell)
	if feed != nil {
		go func() {
			_, _ = io.Copy(feed, stdin)
			feed.Close()
		}()
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// listen reads the shell's lines: "ended" closes p.ended, later lines go
// to p.fromShell.
func (p *process) listen(r *os.File) {
	defer r.Close()
	defer close(p.fromShell)
	sc := bufio.NewScanner(io.LimitReader(r, 4096))
	for sc.Scan() {
		if sc.Text() == command.CtlEnded {
			close(p.ended)
			continue
		}
		p.fromShell <- sc.Text()
	}
}

// tell writes one line to the shell.
func (p *process) tell(line string) error {
	_, err := io.WriteString(p.toShell, line+"\n")
	return err
}

// sweep has the shell kill every process of the sandbox user and waits
// for its report.
func (p *process) sweep(ctx context.Context) error {
	if err := p.tell(command.CtlSweep); err != nil {
		return err
	}
	select {
	case line := <-p.fromShell:
		if line != command.CtlSwept {
			return fmt.Errorf("the command's shell could not sweep the sandbox: %q", line)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the command's shell did not sweep the sandbox: %w", ctx.Err())
	}
}

func (p *process) closeControl() {
	if p.toShell != nil {
		p.toShell.Close()
	}
}

// stdinFile gives the command's stdin: /dev/null for none, the caller's
// file when it is a regular file or a pipe, else a pipe whose write end
// (returned as feed) the caller fills.
func stdinFile(r io.Reader) (in, feed *os.File, err error) {
	if r == nil {
		in, err = os.Open(os.DevNull)
		return in, nil, err
	}
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && (st.Mode().IsRegular() || st.Mode()&os.ModeNamedPipe != 0) {
			in, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
			return in, nil, err
		}
	}
	return os.Pipe()
}

func (p *process) closePipes() {
	for _, f := range p.pipes {
		f.Close()
	}
}

// drain waits for the output to end. Output still open shortly after the
// command ended is held by something it started: the sandbox is swept,
// if no other command runs, and the output is cut after killGrace.
func (i *instance) drain(p *process) {
	done := make(chan struct{})
	go func() {
		p.copied.Wait()
		close(done)
	}()
	defer p.closePipes()
	select {
	case <-done:
		return
	case <-time.After(holdGrace):
	}
	_, _ = i.gate.Alone(i.sweep)
	select {
	case <-done:
	case <-time.After(killGrace):
		p.closePipes()
		<-done
	}
}

// kill kills a command that ran out of time: alone, everything of the
// sandbox user; else the command's session. If runsc exec does not end,
// it is killed and the sandbox destroyed.
func (i *instance) kill(p *process, pidFile string) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	swept, err := i.gate.Alone(func() error { return i.sweepCtx(ctx) })
	if !swept {
		err = i.killSession(ctx, pidFile)
	}
	if err == nil {
		select {
		case <-p.exited:
			return nil
		case <-ctx.Done():
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	_ = i.Destroy(context.Background())
	return fmt.Errorf("command could not be killed (%v); sandbox destroyed: %w", err, sandbox.ErrDestroyed)
}

// sweep kills every process of the sandbox user with a command of its
// own, within killGrace.
func (i *instance) sweep() error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	return i.sweepCtx(ctx)
}

func (i *instance) sweepCtx(ctx context.Context) error {
	if err := command.RetryWhileFull(ctx, func() error { return i.helper(ctx, "sh", "-c", command.SweepScript) }); err != nil {
		return fmt.Errorf("processes left by the command could not be killed: %w", err)
	}
	return nil
}

// killSession kills the session of the command whose pid runsc wrote.
func (i *instance) killSession(ctx context.Context, pidFile string) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("the command's pid: %w", err)
	}
	pid := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(pid); err != nil {
		return fmt.Errorf("the command's pid %q: %w", pid, err)
	}
	return i.helper(ctx, "sh", "-c", command.KillSessionScript, "sh", pid)
}

// helper runs a short command of the backend's own as the sandbox user
// and fails unless it exits 0.
func (i *instance) helper(ctx context.Context, argv ...string) error {
	args := append([]string{"exec", "--user", fmt.Sprintf("%d:%d", sandboxUID, sandboxGID), "--cwd", "/", i.cid}, argv...)
	out, err := i.runsc(ctx, args...)
	if err != nil {
		return fmt.Errorf("%w %s", err, out)
	}
	return nil
}

// afterFailure destroys a sandbox whose command could not be run or
// cleaned up after; the sandbox's state is unknown.
func (i *instance) afterFailure(err error) error {
	_ = i.Destroy(context.Background())
	return fmt.Errorf("%w; sandbox destroyed: %w", err, sandbox.ErrDestroyed)
}
