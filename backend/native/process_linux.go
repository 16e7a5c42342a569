package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// holdGrace is how long a process's output may stay open after the
// process and everything in its cgroup are gone: a descriptor passed to
// a process elsewhere (a KeepAlive one) can hold it; the copy is cut then.
const holdGrace = 2 * time.Second

// process is one process started in a native sandbox.
type process struct {
	inst  *instance
	seq   uint64
	pid   int
	cg    *procCgroup // nil without cgroups
	spec  command.Spec
	stdin *os.File // the write end for OpenStdin, else nil
	usage cgstat.Usage

	done chan struct{}
	res  sandbox.Result
	err  error
}

var _ sandbox.Process = (*process)(nil)

// Start asks init to start one process and returns once it runs.
func (i *instance) Start(ctx context.Context, ps sandbox.ProcessSpec) (sandbox.Process, error) {
	var proxyEnv map[string]string
	if i.policy.Network.Enabled() {
		proxyEnv = egress.Env(sandbox.EgressAddr)
	}
	spec, err := command.Check(i.policy, ps, i.imageEnv, proxyEnv)
	if err != nil {
		return nil, err
	}
	if err := i.enter(); err != nil {
		return nil, err
	}
	// Init must be in its own v1 folders before a process starts: moving
	// it moves all its threads, a forking one too.
	<-i.placed
	started := false
	defer func() {
		if !started {
			i.procs.Done()
		}
	}()
	p := &process{inst: i, seq: i.seq.Add(1), spec: spec, done: make(chan struct{})}
	es := nsinit.ExecSpec{Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir}
	var cgFiles []*os.File
	if i.cg != nil {
		f := i.procFolder()
		if f.err != nil {
			return nil, f.err
		}
		p.cg = f.cg
		es.CgroupTasks = len(f.tasks)
		cgFiles = f.tasks
		if f.dir != nil {
			es.CgroupDir = true
			cgFiles = append(cgFiles, f.dir)
		}
	}
	defer nsinit.CloseAll(cgFiles)
	pp, err := newExecPipes(ps.Stdin, ps.OpenStdin)
	if err != nil {
		p.dropCgroup()
		return nil, err
	}
	// The counters are taken before the process starts: a fork bomb hits
	// the pids cap within its first milliseconds, before this goroutine
	// would see the reply.
	if p.cg != nil {
		p.usage = cgstat.Begin(p.cg.stat)
	}
	go pp.writeSpec(es)
	r, err := i.request(ctx, nsinit.Message{Op: nsinit.OpExec, Seq: p.seq}, append(pp.theirs(), cgFiles...)...)
	if err == nil && r.Error != "" {
		err = errors.New(r.Error)
	}
	pp.closeTheirs()
	if err != nil {
		pp.close()
		p.dropCgroup()
		return nil, fmt.Errorf("start process: %w", err)
	}
	p.pid = r.Pid
	if ps.OpenStdin {
		p.stdin, pp.stdinW = pp.stdinW, nil
	}
	started = true
	go p.run(pp, ps)
	return p, nil
}

// procFolder is a process's cgroup folder and what init needs to start
// the process in it (see cgroup.newProc).
type procFolder struct {
	cg    *procCgroup
	tasks []*os.File
	dir   *os.File
	err   error
}

func (f procFolder) close() {
	nsinit.CloseAll(f.tasks)
	if f.dir != nil {
		f.dir.Close()
	}
}

// newProcFolder makes a process folder. Folders are numbered on their
// own: a prepared one may go to whichever process starts next.
func (i *instance) newProcFolder() procFolder {
	var f procFolder
	f.cg, f.tasks, f.dir, f.err = i.cg.newProc("p"+strconv.FormatUint(i.cgSeq.Add(1), 10), i.hostRoot)
	return f
}

// procFolder returns the folder prepared for the next process, and
// prepares another beside the process's start; without one ready, it
// makes one.
func (i *instance) procFolder() procFolder {
	select {
	case f := <-i.spare:
		i.prepareFolder()
		if f.err == nil {
			return f
		}
	default:
	}
	return i.newProcFolder()
}

// prepareFolder makes the next process's folder in the background:
// several mkdirs and writes per hierarchy that would otherwise come
// before the process's start. Destroy waits for it and closes an unused one.
func (i *instance) prepareFolder() {
	if i.enter() != nil {
		return
	}
	go func() {
		defer i.procs.Done()
		f := i.newProcFolder()
		select {
		case i.spare <- f:
		default:
			f.close()
			if f.err == nil {
				_ = f.cg.remove(0)
			}
		}
	}()
}

// enter counts one more process in, unless the sandbox takes no more
// processes; Destroy waits for the count to drop to zero.
func (i *instance) enter() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone != nil {
		return i.gone
	}
	i.procs.Add(1)
	return nil
}

// dropCgroup removes the process's cgroup when it never ran.
func (p *process) dropCgroup() {
	if p.cg != nil {
		_ = p.cg.remove(p.inst.cmd.Process.Pid)
	}
}

// ID names the process in its sandbox.
func (p *process) ID() string { return "p" + strconv.FormatUint(p.seq, 10) }

// Stdin is the process's stdin pipe, with OpenStdin.
func (p *process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Signal asks init to signal the process.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	r, err := p.inst.request(ctx, nsinit.Message{Op: nsinit.OpSignal, Target: p.seq, Signal: int(sig)})
	if err == nil && r.Error != "" {
		err = errors.New(r.Error)
	}
	return err
}

// Wait waits for the process's Result.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return sandbox.Result{ID: p.inst.id, Backend: "native"}, ctx.Err()
	}
}

// run follows the process to its end: it copies the output, kills the
// process at its timeout, sweeps its cgroup once it ended, and makes the
// Result.
func (p *process) run(pp *execPipes, ps sandbox.ProcessSpec) {
	i := p.inst
	defer i.procs.Done()
	defer pp.close()
	res := sandbox.Result{ID: i.id, Backend: "native", Weakened: i.weakened,
		Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	stdout := command.NewCapBuffer(p.spec.OutputLimit, ps.Stdout)
	stderr := command.NewCapBuffer(p.spec.OutputLimit, ps.Stderr)
	start := time.Now()
	go pp.feedStdin(ps.Stdin)
	var copied sync.WaitGroup
	copied.Add(2)
	go func() { defer copied.Done(); _, _ = io.Copy(stdout, pp.stdoutR) }()
	go func() { defer copied.Done(); _, _ = io.Copy(stderr, pp.stderrR) }()
	status := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(pp.statusR, 1<<16))
		status <- b
	}()
	var timeout <-chan time.Time
	if p.spec.Timeout > 0 {
		t := time.NewTimer(p.spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var statusBytes []byte
	var err error
	select {
	case statusBytes = <-status:
	case <-timeout:
		res.TimedOut = true
		err = p.sweep()
		statusBytes = <-status
	}
	if err == nil {
		err = p.sweep()
	}
	outputDone := make(chan struct{})
	go func() { copied.Wait(); close(outputDone) }()
	select {
	case <-outputDone:
	case <-time.After(holdGrace):
		pp.closeOutput()
		<-outputDone
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	res.Stdout, res.StdoutTruncated = stdout.String(), stdout.Truncated()
	res.Stderr, res.StderrTruncated = stderr.String(), stderr.Truncated()
	st, reported := decodeStatus(statusBytes)
	if !reported && err == nil {
		err = i.goneErr()
		if !errors.Is(err, sandbox.ErrDied) && !errors.Is(err, sandbox.ErrDestroyed) {
			err = fmt.Errorf("process %s: init sent no status: %w", p.ID(), sandbox.ErrDied)
		}
	}
	fillResult(&res, st, reported)
	p.usage.Fill(&res)
	if p.stdin != nil {
		p.stdin.Close()
	}
	if p.cg != nil {
		if rerr := p.cg.remove(p.inst.cmd.Process.Pid); rerr != nil {
			i.backend.opts.Logger.Warn("removing a process's cgroup", "sandbox", i.id, "err", rerr)
		}
	}
	p.res, p.err = res, err
	close(p.done)
}

// sweep kills everything left in the process's cgroup; without cgroups,
// init kills the process's session.
func (p *process) sweep() error {
	if p.cg != nil {
		return p.cg.sweep(p.inst.cmd.Process.Pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	_, _ = p.inst.request(ctx, nsinit.Message{Op: nsinit.OpSignal, Target: p.seq, Signal: int(unix.SIGKILL)})
	_, err := p.inst.request(ctx, nsinit.Message{Op: nsinit.OpSweep, Pid: p.pid})
	if err != nil && !errors.Is(err, sandbox.ErrDestroyed) && !errors.Is(err, sandbox.ErrDied) {
		return fmt.Errorf("sweep: %w", err)
	}
	return nil
}

// fillResult turns init's report into the Result's status fields.
func fillResult(res *sandbox.Result, st nsinit.ExecStatus, reported bool) {
	switch {
	case res.TimedOut:
		res.ExitCode = sandbox.ExitTimeout
		res.Signal = "SIGKILL"
	case !reported:
		res.ExitCode = sandbox.ExitFailed
	case st.Error != "":
		res.ExitCode = st.ExitCode
		res.Stderr += "airlock: " + st.Error + "\n"
	default:
		res.ExitCode = st.ExitCode
		if st.Signal != 0 {
			res.Signal = unix.SignalName(unix.Signal(st.Signal))
		}
	}
	res.Usage.CPUMillis = float64(st.UserMicros+st.SysMicros) / 1000
	res.Usage.PeakMemoryBytes = st.MaxRSS
}

// decodeStatus reads init's report; an empty report means init died
// before it could write one.
func decodeStatus(b []byte) (nsinit.ExecStatus, bool) {
	var st nsinit.ExecStatus
	if len(bytes.TrimSpace(b)) == 0 {
		return st, false
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false
	}
	return st, true
}

// execPipes are the five descriptors one process gets, with the ends the
// supervisor keeps.
type execPipes struct {
	mu               sync.Mutex
	stdinR, stdinW   *os.File // stdinW nil when stdin is /dev/null or passed through
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
	statusR, statusW *os.File
	specR, specW     *os.File
}

func newExecPipes(stdin io.Reader, open bool) (*execPipes, error) {
	p := &execPipes{}
	var err error
	mk := func(r, w **os.File) {
		if err == nil {
			*r, *w, err = os.Pipe()
		}
	}
	mk(&p.stdoutR, &p.stdoutW)
	mk(&p.stderrR, &p.stderrW)
	mk(&p.statusR, &p.statusW)
	mk(&p.specR, &p.specW)
	switch f, ok := stdin.(*os.File); {
	case err != nil:
	case open:
		mk(&p.stdinR, &p.stdinW)
	case stdin == nil:
		p.stdinR, err = os.Open(os.DevNull)
	case ok && passable(f):
		p.stdinR, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	default:
		mk(&p.stdinR, &p.stdinW)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("process pipes: %w", err)
	}
	return p, nil
}

// passable tells whether a caller's stdin file may be handed to the
// sandbox as is: regular files and pipes yes, terminals and devices no.
func passable(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && (st.Mode().IsRegular() || st.Mode()&os.ModeNamedPipe != 0)
}

// theirs are the ends that go to init, in the order of nsinit.OpExec.
func (p *execPipes) theirs() []*os.File {
	return []*os.File{p.stdinR, p.stdoutW, p.stderrW, p.statusW, p.specR}
}

func (p *execPipes) closeTheirs() {
	for _, f := range p.theirs() {
		f.Close()
	}
}

// closeOutput cuts the output copies short.
func (p *execPipes) closeOutput() {
	p.stdoutR.Close()
	p.stderrR.Close()
}

func (p *execPipes) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range []*os.File{p.stdinR, p.stdinW, p.stdoutR, p.stdoutW, p.stderrR, p.stderrW,
		p.statusR, p.statusW, p.specR, p.specW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *execPipes) writeSpec(spec nsinit.ExecSpec) {
	_ = json.NewEncoder(p.specW).Encode(spec)
	p.specW.Close()
}

// feedStdin copies the caller's stdin reader into the process's. It ends
// when the reader ends or the process closes its stdin; a reader that
// blocks forever keeps this goroutine until it returns.
func (p *execPipes) feedStdin(r io.Reader) {
	p.mu.Lock()
	w := p.stdinW
	p.mu.Unlock()
	if w == nil || r == nil {
		return
	}
	_, _ = io.Copy(w, r)
	w.Close()
}
