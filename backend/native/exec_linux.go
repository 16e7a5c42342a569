package native

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// killGrace bounds how long a killed command may take to be reaped before
// the whole sandbox is torn down instead.
const killGrace = 5 * time.Second

// Exec asks init to start one command and waits for it to end.
func (i *instance) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	res := sandbox.Result{ID: i.id, Backend: "native", Weakened: i.weakened,
		Artifacts: []sandbox.Artifact{}, Egress: []sandbox.EgressEvent{}}
	spec, timeout, err := i.execSpec(req)
	if err != nil {
		return res, err
	}
	p, err := newExecPipes(req.Stdin)
	if err != nil {
		return res, err
	}
	defer p.close()
	lim := i.policy.Limits
	stdout := command.NewCapBuffer(lim.OutputBytes, req.Stdout)
	stderr := command.NewCapBuffer(lim.OutputBytes, req.Stderr)
	var usage cgstat.Usage
	if i.cg != nil {
		usage = cgstat.Begin(i.cg.stat)
	}
	start := time.Now()
	egressMark := i.proxy.Cursor()
	seq := i.seq.Add(1)
	go p.writeSpec(spec)
	if err := i.request(ctx, nsinit.Message{Op: nsinit.OpExec, Seq: seq}, p.theirs()...); err != nil {
		return res, fmt.Errorf("start command: %w", err)
	}
	p.closeTheirs()
	go p.feedStdin(req.Stdin)
	var wg sync.WaitGroup
	wg.Add(3)
	var statusBytes []byte
	go func() { defer wg.Done(); _, _ = io.Copy(stdout, p.stdoutR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(stderr, p.stderrR) }()
	go func() { defer wg.Done(); statusBytes, _ = io.ReadAll(io.LimitReader(p.statusR, 1<<16)) }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case <-done:
	case <-timer.C:
		res.TimedOut = true
		waitErr = i.killExec(seq, done)
	case <-ctx.Done():
		waitErr = i.killExec(seq, done)
		if waitErr == nil {
			waitErr = ctx.Err()
		}
	case <-i.dead:
		waitErr = i.deadErr()
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	res.Stdout, res.StdoutTruncated = stdout.String(), stdout.Truncated()
	res.Stderr, res.StderrTruncated = stderr.String(), stderr.Truncated()
	st, reported := decodeStatus(statusBytes)
	fillResult(&res, st, reported, usage)
	res.Egress = append(res.Egress, i.proxy.Since(egressMark)...)
	return res, waitErr
}

// killExec asks init to kill the command and everything it started, and
// waits for the pipes to close. If that does not
// happen in time, the sandbox itself is torn down.
func (i *instance) killExec(seq uint64, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	_ = i.request(ctx, nsinit.Message{Op: nsinit.OpKill, Target: seq})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	_ = i.Destroy(context.Background())
	<-done
	return fmt.Errorf("command did not die after kill; sandbox destroyed: %w", errDead)
}

// fillResult turns init's report and the cgroup counters into the
// Result's status fields. Without cgroups, the usage is init's rusage of
// the command.
func fillResult(res *sandbox.Result, st nsinit.ExecStatus, reported bool, usage cgstat.Usage) {
	switch {
	case res.TimedOut:
		res.ExitCode = sandbox.ExitTimeout
		res.Signal = "SIGKILL"
	case !reported:
		res.ExitCode = 128 + int(unix.SIGKILL)
		res.Signal = "SIGKILL"
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
	usage.Fill(res)
}

// execSpec checks the request and builds init's instructions and the
// effective timeout.
func (i *instance) execSpec(req sandbox.ExecRequest) (nsinit.ExecSpec, time.Duration, error) {
	var proxyEnv map[string]string
	if i.proxy != nil {
		proxyEnv = egress.Env(fmt.Sprintf("127.0.0.1:%d", egressPort))
	}
	c, err := command.Check(i.policy, req, i.imageEnv, proxyEnv)
	if err != nil {
		return nsinit.ExecSpec{}, 0, err
	}
	return nsinit.ExecSpec{Argv: c.Argv, Env: c.Env, Dir: c.Dir}, c.Timeout, nil
}

// sandboxLimits builds what init applies once and every command inherits:
// the sandbox user, rlimits, Landlock. Where a cgroup controller is
// missing, an rlimit stands in for it (weaker, and reported in
// Result.Weakened).
func (i *instance) sandboxLimits(h *hostInfo) *nsinit.Limits {
	lim := i.policy.Limits
	fixed := func(res int, v uint64) nsinit.Rlimit { return nsinit.Rlimit{Resource: res, Cur: v, Max: v} }
	rl := []nsinit.Rlimit{
		fixed(unix.RLIMIT_CORE, 0),
		fixed(unix.RLIMIT_NOFILE, uint64(lim.OpenFiles)),
		fixed(unix.RLIMIT_FSIZE, uint64(lim.DiskBytes)),
	}
	var perCommand []nsinit.Rlimit
	has := func(ctl string) bool { return i.cg != nil && h.cgroups.ctl[ctl] != nil }
	if !has(ctlMemory) {
		perCommand = append(perCommand, fixed(unix.RLIMIT_AS, uint64(lim.MemoryBytes)))
	}
	if !has(ctlCPU) {
		secs := uint64(time.Duration(lim.Timeout).Seconds()*lim.CPUs) + 1
		perCommand = append(perCommand, fixed(unix.RLIMIT_CPU, secs))
	}
	if !has(ctlPids) {
		rl = append(rl, fixed(unix.RLIMIT_NPROC, uint64(lim.Pids+InitTasks)))
	}
	l := &nsinit.Limits{UID: sandboxUID, GID: sandboxGID, SetGroups: !i.rootless, Rlimits: rl,
		CommandRlimits: perCommand, OOMScoreAdj: 1000}
	if h.landlockABI > 0 {
		l.Landlock = &nsinit.LandlockConfig{
			ABI:      h.landlockABI,
			ReadOnly: []string{"/"},
			Writable: []string{"/tmp", nsinit.OutputDir, "/dev/shm", "/dev/mqueue"},
			Devices:  prefixAll("/dev/", nsinit.DeviceNodes),
		}
	}
	return l
}

func prefixAll(p string, names []string) []string {
	out := make([]string, len(names))
	for k, n := range names {
		out[k] = p + n
	}
	return out
}

// execPipes are the five descriptors one command gets, with the ends the
// supervisor keeps.
type execPipes struct {
	stdinR, stdinW   *os.File // stdinW nil when stdin is /dev/null or passed through
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
	statusR, statusW *os.File
	specR, specW     *os.File
}

func newExecPipes(stdin io.Reader) (*execPipes, error) {
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
	case stdin == nil:
		p.stdinR, err = os.Open(os.DevNull)
	case ok && passable(f):
		p.stdinR, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	default:
		mk(&p.stdinR, &p.stdinW)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("command pipes: %w", err)
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

func (p *execPipes) close() {
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

// feedStdin copies the caller's stdin into the command's. It ends when the
// reader ends or the command closes its stdin; a reader that blocks
// forever keeps this goroutine until it returns.
func (p *execPipes) feedStdin(r io.Reader) {
	if p.stdinW == nil {
		return
	}
	_, _ = io.Copy(p.stdinW, r)
	p.stdinW.Close()
}
