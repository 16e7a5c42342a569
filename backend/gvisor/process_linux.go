package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/procs"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Each process is a runsc exec as uid 1000, whose stdio are host pipes
// (or the caller's own file for stdin) that the sandbox reads and writes
// directly. runsc exec itself writes the process's pid inside the sandbox
// into a host file (--internal-pid-file), and exits with the process's
// status. What the host must do inside, runsc does where it can (kill
// --pid, ps); the sweep's kills are a root helper's, a runsc exec as uid 0
// with CAP_KILL, which the code can neither signal nor trace and which the
// sandbox user's RLIMIT_NPROC does not hold back. No channel the host
// reads is open to the code but its own stdout and stderr.

// Start starts one process as the sandbox user with runsc exec.
func (i *instance) Start(ctx context.Context, ps sandbox.ProcessSpec) (sandbox.Process, error) {
	spec, err := command.Check(i.policy, ps, i.imageEnv, i.proxyEnv)
	if err != nil {
		return nil, err
	}
	if err := i.sb.Enter(); err != nil {
		return nil, err
	}
	p, err := i.startProcess(ctx, spec, ps)
	if err != nil {
		i.sb.Leave()
		if gone := i.sb.Err(); gone != nil {
			err = fmt.Errorf("%w (%w)", gone, err)
		}
		return nil, fmt.Errorf("start process: %w", err)
	}
	return p, nil
}

func (i *instance) startProcess(ctx context.Context, spec command.Spec, ps sandbox.ProcessSpec) (*procs.Process, error) {
	started := time.Now()
	placed := i.sb.Placing()
	defer func() {
		if placed != nil {
			placed()
		}
	}()
	id := i.sb.NextID()
	pidFile := filepath.Join(i.dir.Path(), "pid-"+id)
	args := []string{"exec", "--user", fmt.Sprintf("%d:%d", sandboxUID, sandboxGID), "--cwd", spec.Dir, "--internal-pid-file", pidFile}
	for _, kv := range spec.Env {
		args = append(args, "--env", kv)
	}
	args = append(append(args, i.cid), command.Wrap(spec, command.WrapOptions{})...)
	cmd := exec.Command(i.backend.probe().runsc, append(slices.Clone(i.flags), args...)...)
	p := &process{inst: i, cmd: cmd, pidFile: pidFile, exited: make(chan struct{})}
	stdout, stderr := command.NewCapBuffer(spec.OutputLimit, ps.Stdout), command.NewCapBuffer(spec.OutputLimit, ps.Stderr)
	out, stdin, err := p.startCmd(ps, stdout, stderr)
	if err != nil {
		os.Remove(pidFile)
		return nil, err
	}
	if p.pid, err = waitPIDFile(ctx, pidFile, p.exited); err != nil {
		// runsc exec failed, or the process ended before runsc wrote its
		// pid: it is followed as any other, and spares no tree
		i.backend.opts.Logger.Debug("process pid unknown", "sandbox", i.id, "err", err)
	}
	p.usage = cgstat.Begin(i.stat)
	// placed only once tracked: a sweep in between would not spare it
	return procs.Run(i.sb, procs.Config{ID: id, Spec: spec, Stdout: stdout, Stderr: stderr, Output: out, Stdin: stdin,
		KeepAlive: ps.KeepAlive, PID: p.pid, Weakened: i.weakened, Started: started, Ops: p}), nil
}

// startCmd starts runsc exec with the process's stdio: stdout and stderr
// pipes copied into the buffers; stdin the caller's file when it is a
// regular file or a pipe, a pipe fed from its reader, a pipe for
// OpenStdin (returned), or /dev/null.
func (p *process) startCmd(ps sandbox.ProcessSpec, stdout, stderr *command.CapBuffer) (procs.Output, io.WriteCloser, error) {
	var theirs, ours []*os.File
	defer func() { closeAll(theirs) }()
	fail := func(err error) (procs.Output, io.WriteCloser, error) {
		closeAll(ours)
		return nil, nil, err
	}
	in, feed, err := stdinFile(ps.Stdin, ps.OpenStdin)
	if err != nil {
		return fail(err)
	}
	theirs = append(theirs, in)
	if feed != nil {
		ours = append(ours, feed)
	}
	var reads [2]*os.File
	for k := range reads {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		theirs, ours = append(theirs, w), append(ours, r)
		reads[k] = r
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = in, theirs[1], theirs[2]
	if err := p.cmd.Start(); err != nil {
		return fail(fmt.Errorf("runsc exec: %w", err))
	}
	p.inst.sb.Go(func() {
		_ = p.cmd.Wait()
		close(p.exited)
	})
	out := procs.CopyPipes(p.inst.sb, reads[0], reads[1], stdout, stderr)
	switch {
	case ps.OpenStdin:
		return out, feed, nil
	case feed != nil:
		p.inst.sb.Go(func() {
			_, _ = io.Copy(feed, ps.Stdin)
			feed.Close()
		})
	}
	return out, nil, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// stdinFile gives the process's stdin: /dev/null for none, the caller's
// file when it is a regular file or a pipe, else a pipe whose write end
// (feed) the host fills.
func stdinFile(r io.Reader, open bool) (in, feed *os.File, err error) {
	if open {
		return os.Pipe()
	}
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

// waitPIDFile waits for runsc exec to write the process's pid inside the
// sandbox, until the exec ends or ctx does.
func waitPIDFile(ctx context.Context, file string, exited <-chan struct{}) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, procs.KillGrace)
	defer cancel()
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err != nil || pid <= 1 {
				return 0, fmt.Errorf("pid file %q: %w", b, err)
			}
			return pid, nil
		}
		select {
		case <-exited:
			return 0, errors.New("runsc exec ended before it wrote the pid")
		case <-ctx.Done():
			return 0, fmt.Errorf("runsc exec wrote no pid: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// process is one runsc exec.
type process struct {
	inst    *instance
	cmd     *exec.Cmd
	pidFile string
	pid     int // inside the sandbox; 0 if unknown
	usage   cgstat.Usage
	exited  chan struct{} // closed when runsc exec has been waited for
}

var _ procs.Ops = (*process)(nil)

// Exited is closed when runsc exec has ended, which it does when the
// process does.
func (p *process) Exited() <-chan struct{} { return p.exited }

// Status is runsc exec's exit status, which is the process's; when the
// sandbox ended under it, runsc exec's own is not.
func (p *process) Status(ctx context.Context) (int, error) {
	code := p.cmd.ProcessState.ExitCode()
	if code < 0 {
		return 0, fmt.Errorf("runsc exec: %s", p.cmd.ProcessState)
	}
	// runsc exec's own failures are 128; so is the end of a sandbox
	// under it
	wait := time.Duration(0)
	if code == 128 {
		wait = time.Second
	}
	if p.inst.sentryGone(wait) {
		return 0, fmt.Errorf("the sandbox ended under the process (runsc exec exited %d)", code)
	}
	return code, nil
}

// Signal has runsc signal the process.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	if p.pid == 0 {
		return fmt.Errorf("the process's pid inside the sandbox is unknown")
	}
	_, err := p.inst.runsc(ctx, "kill", "--pid", strconv.Itoa(p.pid), p.inst.cid, strconv.Itoa(int(sig)))
	return err
}

// Kill kills the process: with runsc by its pid, else runsc exec itself,
// which gVisor answers by killing the process. What it started goes with
// the sweep that follows its end.
func (p *process) Kill(ctx context.Context) error {
	if p.pid == 0 {
		return p.cmd.Process.Kill()
	}
	return p.Signal(ctx, syscall.SIGKILL)
}

// Sweep kills every process of the sandbox user that is not in the tree
// of a live process. runsc ps says whether there is any; only then does
// the root helper run.
func (p *process) Sweep(ctx context.Context, spare []int) error {
	err := p.inst.sweep(ctx, p.pid, spare)
	if err != nil && p.inst.sentryGone(time.Second) {
		return nil // the sandbox ended: nothing is left in it
	}
	return err
}

// Usage reads the sandbox's counters (the host cannot tell one process's
// share), and whether the host's OOM killer ended the sandbox.
func (p *process) Usage(res *sandbox.Result) {
	p.usage.Fill(res)
	if !res.OOMKilled && p.inst.sentryGone(0) {
		res.OOMKilled = p.inst.oomKilled()
	}
}

// Release removes the pid file.
func (p *process) Release() { os.Remove(p.pidFile) }

// sweep kills the sandbox user's processes that are not in the trees of
// spare, after the process gone ended.
func (i *instance) sweep(ctx context.Context, gone int, spare []int) error {
	out, err := i.runsc(ctx, "ps", i.cid)
	if err != nil {
		return err
	}
	if len(leftovers(parsePS(out), sandboxUID, spare)) == 0 {
		return nil
	}
	// the helper also spares the sessions of spare, which runsc ps
	// does not show, and kills until a pass finds nothing
	return i.helper(ctx, command.ReapArgs(sandboxUID, gone, spare))
}

// helper runs a command of the backend's own as root with CAP_KILL inside
// the sandbox, and fails unless it exits 0.
func (i *instance) helper(ctx context.Context, argv []string) error {
	args := append([]string{"exec", "--user", "0:0", "--cap", "CAP_KILL", "--cwd", "/", i.cid}, argv...)
	if out, err := i.runsc(ctx, args...); err != nil {
		return fmt.Errorf("%w %s", err, out)
	}
	return nil
}

// psEntry is one process of runsc ps.
type psEntry struct {
	UID, PID, PPID int
}

// parsePS reads runsc ps's table ("UID PID PPID PGID C TTY STIME TIME
// CMD"; its --format=json has pids only). CMD is a process's own name,
// which may hold a newline and so make a line of its own: only lines
// whose first four fields are numbers count. A line forged so can only
// add a process that is not there, which makes the helper run for
// nothing; it cannot hide one.
func parsePS(out []byte) []psEntry {
	var list []psEntry
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		var n [4]int
		ok := true
		for k := range n {
			v, err := strconv.Atoi(f[k])
			if err != nil || v < 0 {
				ok = false
				break
			}
			n[k] = v
		}
		if ok {
			list = append(list, psEntry{UID: n[0], PID: n[1], PPID: n[2]})
		}
	}
	return list
}

// leftovers lists the processes of uid in list that are in the tree of
// no process of spare (the process or one of its ancestors).
func leftovers(list []psEntry, uid int, spare []int) []int {
	parent := map[int]int{}
	for _, e := range list {
		parent[e.PID] = e.PPID
	}
	var out []int
	for _, e := range list {
		if e.UID != uid {
			continue
		}
		in := false
		for q, depth := e.PID, 0; q > 1 && depth < 64 && !in; q, depth = parent[q], depth+1 {
			in = slices.Contains(spare, q)
		}
		if !in {
			out = append(out, e.PID)
		}
	}
	return out
}
