package nsinit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// initMain is pid 1 of the sandbox. It builds the root, then serves the
// supervisor's requests: start a command, kill one. It reaps every
// process of the sandbox. When the supervisor goes away, so does init,
// and the kernel kills everything else in the sandbox's pid namespace.
func initMain() int {
	// Die with the supervisor. A supervisor that died before this line
	// closed the control socket, which ends the loop below.
	_ = prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL))
	_ = prctl(unix.PR_SET_DUMPABLE, 0)
	ignoreSignals()
	// Descriptors the supervisor inherited without close-on-exec came
	// along; none of them may reach a command.
	_ = unix.CloseRange(4, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	ch, err := NewChannel(os.NewFile(3, "control"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock init:", err)
		return 1
	}
	if err := ch.Send(Message{Op: OpHello}); err != nil {
		return 1
	}
	m, _, err := ch.Recv()
	if err != nil || m.Op != OpConfig || m.Config == nil || m.Config.Limits == nil {
		fmt.Fprintln(os.Stderr, "airlock init: no config:", err)
		return 1
	}
	br, err := setupSandbox(m.Config)
	if err != nil {
		_ = ch.Send(Message{Op: OpReady, Error: err.Error()})
		return 1
	}
	sp, err := newSpawner(m.Config.Limits)
	if err != nil {
		_ = ch.Send(Message{Op: OpReady, Error: err.Error()})
		return 1
	}
	files := []*os.File{br.output, br.input}
	if br.egress != nil {
		files = append(files, br.egress)
	}
	err = ch.Send(Message{Op: OpReady}, files...)
	CloseAll(files)
	if err != nil {
		return 1
	}
	in := &initState{ch: ch, limits: m.Config.Limits, spawner: sp, running: map[int]*command{}, bySeq: map[uint64]*command{}}
	// Ask for SIGCHLD before the first command can start: a child that
	// ends before anyone listens would stay a zombie, unreaped.
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	go in.reapLoop(sigchld)
	in.serve()
	return 0
}

// setupSandbox does everything that must happen once, before any command.
func setupSandbox(cfg *Config) (builtRoot, error) {
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return builtRoot{}, fmt.Errorf("sethostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return builtRoot{}, err
	}
	br, err := buildRoot(cfg)
	if err != nil {
		return br, err
	}
	if cfg.EgressPort > 0 {
		if br.egress, err = listenLoopback(cfg.EgressPort); err != nil {
			return br, err
		}
	}
	return br, applyLimits(cfg.Limits)
}

// listenLoopback opens a listening TCP socket on 127.0.0.1:port of the
// sandbox's network namespace. The supervisor accepts on it: the socket
// stays in this namespace, so the proxy is reachable from inside and
// nothing else is.
func listenLoopback(port int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress listener: %w", err)
	}
	f := os.NewFile(uintptr(fd), "egress")
	addr := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(fd, addr); err != nil {
		f.Close()
		return nil, fmt.Errorf("egress listener on 127.0.0.1:%d: %w", port, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		f.Close()
		return nil, fmt.Errorf("egress listener: %w", err)
	}
	return f, nil
}

// loopbackUp brings up lo, the only interface of the sandbox's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// command is one running command, as init tracks it.
type command struct {
	seq    uint64
	pid    int
	status *os.File
}

// initState is init's bookkeeping while it serves requests.
type initState struct {
	ch      *Channel
	limits  *Limits
	spawner *spawner

	// mu orders starting commands against ending them, so that clearing
	// the leftovers of the last command never hits a command just started.
	mu      sync.Mutex
	running map[int]*command
	bySeq   map[uint64]*command
}

func (in *initState) serve() {
	for {
		m, files, err := in.ch.Recv()
		if err != nil {
			return // the supervisor is gone: end the sandbox
		}
		go in.handle(m, files)
	}
}

func (in *initState) handle(m Message, files []*os.File) {
	defer CloseAll(files)
	var err error
	switch m.Op {
	case OpExec:
		err = in.exec(m.Seq, files)
	case OpKill:
		in.kill(m.Target)
	default:
		err = fmt.Errorf("unknown request %q", m.Op)
	}
	reply := Message{Op: OpDone, Seq: m.Seq}
	if err != nil {
		reply.Error = err.Error()
	}
	_ = in.ch.Send(reply)
}

// exec starts a command. The five descriptors are its stdin, stdout and
// stderr, then the status pipe init reports on and the pipe the spec
// comes through. A command that cannot start is reported on the status
// pipe like one that exited, with the shell's 126 or 127.
func (in *initState) exec(seq uint64, files []*os.File) error {
	if len(files) != 5 {
		return fmt.Errorf("exec: want 5 descriptors, got %d", len(files))
	}
	var spec ExecSpec
	if err := json.NewDecoder(io.LimitReader(files[4], 64<<20)).Decode(&spec); err != nil {
		return fmt.Errorf("exec spec: %w", err)
	}
	status, err := dupFile(files[3])
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	pid, code, err := in.spawner.spawn(spec, []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()})
	if err != nil {
		writeStatus(status, ExecStatus{Error: err.Error(), ExitCode: code})
		return nil
	}
	if err := limitAll(in.limits.CommandRlimits); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		writeStatus(status, ExecStatus{Error: err.Error(), ExitCode: 126})
		return nil
	}
	// Under memory pressure on the host, sandboxed code goes first.
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(in.limits.OOMScoreAdj)), 0)
	c := &command{seq: seq, pid: pid, status: status}
	in.running[pid] = c
	in.bySeq[seq] = c
	return nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func writeStatus(f *os.File, st ExecStatus) {
	b, _ := json.Marshal(st)
	_, _ = f.Write(b)
	f.Close()
}

// reapLoop reaps every child of init: commands, and whatever they left
// behind, which the kernel hands to pid 1.
func (in *initState) reapLoop(sig <-chan os.Signal) {
	for range sig {
		for {
			var ws unix.WaitStatus
			var ru unix.Rusage
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			in.finished(pid, ws, &ru)
		}
	}
}

// finished records the end of a command. When it was the last command
// running, everything left in the sandbox is killed: background and
// double-forked processes never outlive the commands that started them.
func (in *initState) finished(pid int, ws unix.WaitStatus, ru *unix.Rusage) {
	in.mu.Lock()
	c, ok := in.running[pid]
	if ok {
		delete(in.running, pid)
		delete(in.bySeq, c.seq)
		if len(in.running) == 0 {
			killAllAndReap()
		}
	}
	in.mu.Unlock()
	if !ok {
		return
	}
	st := ExecStatus{
		UserMicros: ru.Utime.Sec*1e6 + ru.Utime.Usec,
		SysMicros:  ru.Stime.Sec*1e6 + ru.Stime.Usec,
		MaxRSS:     ru.Maxrss * 1024,
	}
	switch {
	case ws.Exited():
		st.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		st.Signal = int(ws.Signal())
		st.ExitCode = 128 + st.Signal
	}
	writeStatus(c.status, st)
}

// killAllAndReap kills every process in the sandbox but init and waits
// until all are reaped, so none is left when the command is reported done.
// From pid 1, kill(-1) reaches every other process of the namespace.
func killAllAndReap() {
	_ = unix.Kill(-1, unix.SIGKILL)
	for {
		_, err := unix.Wait4(-1, nil, 0, nil)
		if err != unix.EINTR && err != nil {
			return // ECHILD: nothing left
		}
	}
}

// kill ends a command and everything it started. When it is the only
// command, that is everything in the sandox but init; otherwise its
// descendants are found by their parent links.
func (in *initState) kill(seq uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c, ok := in.bySeq[seq]
	if !ok {
		return
	}
	if len(in.running) == 1 {
		_ = unix.Kill(-1, unix.SIGKILL) // the main process is then reaped by reapLoop
		return
	}
	for _, pid := range descendants(c.pid) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	_ = unix.Kill(c.pid, unix.SIGKILL)
}

// limitAll sets the per-command rlimits on every process of the sandbox
// but init. The command ran from its fork on and may have forked before
// its limits came: children inherit limits only when they are forked. So
// each pass sets them on every process that lacks them, until a pass
// finds none (a process that has them passes them on).
func limitAll(rls []Rlimit) error {
	for changed := len(rls) > 0; changed; {
		changed = false
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return fmt.Errorf("limits: %w", err)
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == 1 {
				continue
			}
			for _, rl := range rls {
				var cur unix.Rlimit
				want := unix.Rlimit{Cur: rl.Cur, Max: rl.Max}
				err := unix.Prlimit(pid, rl.Resource, nil, &cur)
				if err == nil && cur.Cur <= want.Cur && cur.Max <= want.Max {
					continue // as low as the policy's, or lower by the process's own choice
				}
				if err == nil {
					err = unix.Prlimit(pid, rl.Resource, &want, nil)
					changed = true
				}
				if err != nil && err != unix.ESRCH {
					return fmt.Errorf("limit %d of process %d: %w", rl.Resource, pid, err)
				}
			}
		}
	}
	return nil
}

// descendants lists the processes below pid, read from /proc.
func descendants(root int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				parent[pid], _ = strconv.Atoi(f[1])
			}
		}
	}
	var out []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
