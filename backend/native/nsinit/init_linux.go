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

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"golang.org/x/sys/unix"
)

// initMain is pid 1 of the sandbox. It builds the root, then serves the
// supervisor's requests: start a process, signal one, file operations. It
// reaps every process of the sandbox. Killing what a process left is the
// supervisor's job, through the process's own cgroup; init never shares a
// cgroup with the code. When the supervisor goes away, so does init, and
// the kernel kills everything else in the sandbox's pid namespace.
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
	m, binds, err := ch.Recv()
	if err != nil || m.Op != OpConfig || m.Config == nil || m.Config.Limits == nil {
		fmt.Fprintln(os.Stderr, "airlock init: no config:", err)
		return 1
	}
	in, files, err := setupSandbox(ch, m.Config, binds)
	CloseAll(binds)
	if err != nil {
		_ = ch.Send(Message{Op: OpReady, Error: err.Error()})
		return 1
	}
	err = ch.Send(Message{Op: OpReady}, files...)
	CloseAll(files)
	if err != nil {
		return 1
	}
	// Ask for SIGCHLD before the first command can start: a child that
	// ends before anyone listens would stay a zombie, unreaped.
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	go in.reapLoop(sigchld)
	in.serve()
	return 0
}

// setupSandbox does everything that must happen once, before any command,
// and returns init's state and the descriptors for the supervisor: the
// output folder and, with egress, the proxy's listening socket.
func setupSandbox(ch *Channel, cfg *Config, binds []*os.File) (*initState, []*os.File, error) {
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return nil, nil, fmt.Errorf("sethostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, nil, err
	}
	// The sysctls are opened now, while /proc/sys is the host's proc and
	// writable, and written once the root is built: its detached mounts
	// count as mount namespaces, which the budgets set to none.
	sysctls, err := openSysctls(cfg.Sysctls)
	if err != nil {
		return nil, nil, err
	}
	defer CloseAll(sysctls)
	br, err := buildRoot(cfg, binds)
	if err != nil {
		return nil, nil, err
	}
	if err := writeSysctls(sysctls, cfg.Sysctls); err != nil {
		return nil, nil, err
	}
	files := []*os.File{br.output}
	if cfg.EgressPort > 0 {
		l, err := listenLoopback(cfg.EgressPort)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, l)
	}
	if err := applyLimits(cfg.Limits); err != nil {
		return nil, nil, err
	}
	sp, err := newSpawner(cfg.Limits)
	if err != nil {
		return nil, nil, err
	}
	in := &initState{
		ch: ch, limits: cfg.Limits, spawner: sp, sweepByInit: cfg.SweepByInit,
		running: map[int]*command{}, bySeq: map[uint64]*command{},
		fs: dirfs.New(
			dirfs.Root{Path: "/tmp", Dir: br.tmp, UID: cfg.UID, GID: cfg.GID},
			dirfs.Root{Path: OutputDir, Dir: br.outputRW, UID: cfg.UID, GID: cfg.GID},
			// inputs belong to init's own user: the sandbox's root, or,
			// rootless, the sandbox user, on a mount the code sees read-only
			dirfs.Root{Path: InputDir, Dir: br.input, UID: os.Geteuid(), GID: os.Getegid(), ReadOnly: true},
		),
		fileOps: make(chan struct{}, maxFileOps),
	}
	return in, files, nil
}

// openSysctls opens each named file under /proc/sys for writing. The
// files belong to init's own namespaces (user, pid, net), whatever proc
// mount they are reached through.
func openSysctls(kvs [][2]string) ([]*os.File, error) {
	files := make([]*os.File, 0, len(kvs))
	for _, kv := range kvs {
		if strings.Contains(kv[0], "..") {
			CloseAll(files)
			return nil, fmt.Errorf("sysctl %q: bad name", kv[0])
		}
		f, err := os.OpenFile("/proc/sys/"+kv[0], os.O_WRONLY, 0)
		if err != nil {
			CloseAll(files)
			return nil, fmt.Errorf("sysctl %s: %w", kv[0], err)
		}
		files = append(files, f)
	}
	return files, nil
}

// writeSysctls writes each value into its opened file, in order.
func writeSysctls(files []*os.File, kvs [][2]string) error {
	for k, f := range files {
		if _, err := f.WriteString(kvs[k][1]); err != nil {
			return fmt.Errorf("sysctl %s = %s: %w", kvs[k][0], kvs[k][1], err)
		}
	}
	return nil
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

// maxFileOps bounds the file operations init carries out at once; each
// holds a descriptor or two and a goroutine.
const maxFileOps = 16

// initState is init's bookkeeping while it serves requests.
type initState struct {
	ch          *Channel
	limits      *Limits
	spawner     *spawner
	sweepByInit bool
	fs          *dirfs.FS
	fileOps     chan struct{}

	// mu orders starting a command against reaping it, so that a command
	// that ends at once is known when its exit is reaped.
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
	reply := Message{Op: OpDone, Seq: m.Seq}
	var err error
	switch m.Op {
	case OpExec:
		reply.Pid, err = in.exec(m.Seq, files)
	case OpSignal:
		in.signal(m.Target, m.Signal)
	case OpSweep:
		sweepSession(m.Pid, in.liveSessions())
	case OpFile:
		in.fileOps <- struct{}{}
		reply = in.file(reply, m.File, files)
		<-in.fileOps
	default:
		err = fmt.Errorf("unknown request %q", m.Op)
	}
	if err != nil {
		reply.Error = err.Error()
	}
	_ = in.ch.Send(reply)
}

// exec starts a command. The descriptors are its stdin, stdout and
// stderr, the status pipe init reports on, the pipe the spec comes
// through, and the cgroups to start it in (see ExecSpec). A command that
// cannot start is reported on the status pipe like one that exited, with
// the shell's 126 or 127.
func (in *initState) exec(seq uint64, files []*os.File) (int, error) {
	if len(files) < 5 {
		return 0, fmt.Errorf("exec: want at least 5 descriptors, got %d", len(files))
	}
	var spec ExecSpec
	if err := json.NewDecoder(io.LimitReader(files[4], 64<<20)).Decode(&spec); err != nil {
		return 0, fmt.Errorf("exec spec: %w", err)
	}
	cg, err := spec.cgroups(files[5:])
	if err != nil {
		return 0, err
	}
	status, err := dupFile(files[3])
	if err != nil {
		return 0, err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	pid, code, err := in.spawner.spawn(spec, []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}, cg)
	if err != nil {
		writeStatus(status, ExecStatus{Error: err.Error(), ExitCode: code})
		return 0, nil
	}
	if err := limitAll(in.limits.CommandRlimits); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		writeStatus(status, ExecStatus{Error: err.Error(), ExitCode: 126})
		return 0, nil
	}
	// Under memory pressure on the host, sandboxed code goes first.
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(in.limits.OOMScoreAdj)), 0)
	c := &command{seq: seq, pid: pid, status: status}
	in.running[pid] = c
	in.bySeq[seq] = c
	return pid, nil
}

// signal sends sig to the main process of exec seq, if it still runs.
func (in *initState) signal(seq uint64, sig int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.bySeq[seq]; ok && sig > 0 && sig < 65 {
		_ = unix.Kill(c.pid, unix.Signal(sig))
	}
}

// liveSessions lists the sessions of the commands still running: every
// command leads a session of its own.
func (in *initState) liveSessions() map[int]bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	live := map[int]bool{}
	for pid := range in.running {
		live[pid] = true
	}
	return live
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

// finished reports the end of a command on its status pipe. What the
// command left running is the supervisor's to kill, through the command's
// cgroup (or, without cgroups, with a sweep request).
func (in *initState) finished(pid int, ws unix.WaitStatus, ru *unix.Rusage) {
	in.mu.Lock()
	c, ok := in.running[pid]
	if ok {
		delete(in.running, pid)
		delete(in.bySeq, c.seq)
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

// sweepSession kills, without cgroups to do it, what a command left: the
// processes of its session, and orphans whose session is no running
// command's (a daemon that started a session of its own). It repeats
// until a pass finds nothing, since a process may fork while it runs.
func sweepSession(sid int, live map[int]bool) {
	for range 1000 {
		found := false
		for _, p := range processes() {
			if p.pid == 1 || live[p.sid] {
				continue
			}
			if p.sid == sid || p.ppid == 1 {
				_ = unix.Kill(p.pid, unix.SIGKILL)
				found = true
			}
		}
		if !found {
			return
		}
	}
}

// procInfo is what /proc/PID/stat says of a process's place in the tree.
type procInfo struct{ pid, ppid, sid int }

// processes reads every process of the sandbox's pid namespace.
func processes() []procInfo {
	var out []procInfo
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
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// after the name: state ppid pgrp session …
		f := strings.Fields(s[i+1:])
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		sid, _ := strconv.Atoi(f[3])
		out = append(out, procInfo{pid, ppid, sid})
	}
	return out
}

// limitAll sets the per-command rlimits on every process of the sandbox
// but init. The command ran from its fork on and may have forked before
// its limits came: children inherit limits only when they are forked. So
// each pass sets them on every process that lacks them, until a pass
// finds none (a process that has them passes them on).
func limitAll(rls []Rlimit) error {
	for changed := len(rls) > 0; changed; {
		changed = false
		for _, p := range processes() {
			if p.pid == 1 {
				continue
			}
			for _, rl := range rls {
				var cur unix.Rlimit
				want := unix.Rlimit{Cur: rl.Cur, Max: rl.Max}
				err := unix.Prlimit(p.pid, rl.Resource, nil, &cur)
				if err == nil && cur.Cur <= want.Cur && cur.Max <= want.Max {
					continue // as low as the policy's, or lower by the process's own choice
				}
				if err == nil {
					err = unix.Prlimit(p.pid, rl.Resource, &want, nil)
					changed = true
				}
				if err != nil && err != unix.ESRCH {
					return fmt.Errorf("limit %d of process %d: %w", rl.Resource, p.pid, err)
				}
			}
		}
	}
	return nil
}
