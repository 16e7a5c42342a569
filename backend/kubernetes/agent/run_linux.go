package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds on the end of a process.
const (
	// drainWait is how long the output may stay open after the process
	// and what it left were killed (something elsewhere holds a copy).
	drainWait = 2 * time.Second
	// sweepRounds bounds the kill rounds of one sweep.
	sweepRounds = 10000
)

// shepherd runs one process for the backend; see the package doc.
type shepherd struct {
	out   sync.Mutex // frames to stdout are written whole
	spec  RunSpec
	pid   int
	stdin *os.File // write end of the process's stdin pipe, nil without one

	exited   chan struct{} // closed when the process was reaped
	status   unix.WaitStatus
	killTree chan struct{} // closed when the process and its tree must die
	killOnce sync.Once
	timedOut bool
}

// runShepherd is "run": it reads the RunSpec, starts the process and
// serves the run protocol until the process and what it left are gone.
func runShepherd([]string) int {
	s := &shepherd{exited: make(chan struct{}), killTree: make(chan struct{})}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return s.fail("cannot become the subreaper: %v", err)
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	kind, b, err := ReadFrame(os.Stdin)
	if err != nil || kind != FrameSpec {
		return s.fail("no spec: kind %q, %v", kind, err)
	}
	if err := json.Unmarshal(b, &s.spec); err != nil || len(s.spec.Argv) == 0 {
		return s.fail("bad spec: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return s.fail("%v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return s.fail("%v", err)
	}
	stdin, err := s.stdinFile()
	if err != nil {
		return s.fail("%v", err)
	}
	self, err := os.Executable()
	if err != nil {
		return s.fail("%v", err)
	}
	argv := append([]string{self, CmdExec, strconv.FormatUint(s.spec.NProc, 10), strconv.FormatUint(s.spec.NoFile, 10),
		strconv.FormatUint(s.spec.FSize, 10), "--"}, s.spec.Argv...)
	p, err := os.StartProcess(self, argv, &os.ProcAttr{Dir: s.spec.Dir, Env: s.spec.Env,
		Files: []*os.File{stdin, outW, errW}, Sys: &syscall.SysProcAttr{Setsid: true}})
	stdin.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		return s.fail("%v", err)
	}
	s.pid = p.Pid
	_ = s.send(FrameStarted, Started{PID: s.pid})

	var copies sync.WaitGroup
	var counts [2]int64
	for k, r := range []*os.File{outR, errR} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			counts[k] = s.relay(r, []byte{FrameStdout, FrameStderr}[k])
		}()
	}
	go s.reap()
	go s.listen()
	var timeout <-chan time.Time
	if s.spec.Timeout > 0 {
		t := time.NewTimer(time.Duration(s.spec.Timeout))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-s.exited:
	case <-timeout:
		s.timedOut = true
		s.kill()
	case <-s.killTree:
	}
	if s.timedOut || isClosed(s.killTree) {
		_ = unix.Kill(-s.pid, unix.SIGKILL) // its session's group first, then the rest below
		_ = unix.Kill(s.pid, unix.SIGKILL)
		<-s.exited
	}
	swept := sweep(s.pid) // the process leads a session of its own (Setsid)
	drained := make(chan struct{})
	go func() {
		copies.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainWait):
		outR.Close()
		errR.Close()
		<-drained
	}
	exit := Exit{StdoutBytes: counts[0], StderrBytes: counts[1], Swept: swept, TimedOut: s.timedOut}
	switch {
	case s.status.Exited():
		exit.Code = s.status.ExitStatus()
	case s.status.Signaled():
		exit.Code = 128 + int(s.status.Signal())
		exit.Signal = unix.SignalName(s.status.Signal())
	}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
		exit.CPUMillis = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
		exit.MaxRSS = ru.Maxrss << 10
	}
	_ = s.send(FrameExit, exit)
	return 0
}

// fail reports a process that could not start, as a Started with an
// error, and returns the exit status of the shepherd.
func (s *shepherd) fail(format string, a ...any) int {
	_ = s.send(FrameStarted, Started{Error: fmt.Sprintf(format, a...)})
	return 1
}

// send writes one JSON frame.
func (s *shepherd) send(kind byte, v any) error {
	s.out.Lock()
	defer s.out.Unlock()
	return WriteJSON(os.Stdout, kind, v)
}

// stdinFile is the process's stdin: a pipe that listen feeds, or
// /dev/null.
func (s *shepherd) stdinFile() (*os.File, error) {
	if !s.spec.Stdin {
		return os.Open(os.DevNull)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.stdin = w
	return r, nil
}

// relay sends what the process writes on r as frames of kind, within the
// spec's Keep unless it streams, and returns how much it wrote in all.
func (s *shepherd) relay(r *os.File, kind byte) int64 {
	defer r.Close()
	buf := make([]byte, DataChunk)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			send := int64(n)
			if !s.spec.Stream {
				send = max(0, min(send, s.spec.Keep-total))
			}
			total += int64(n)
			if send > 0 {
				s.out.Lock()
				werr := WriteFrame(os.Stdout, kind, buf[:send])
				s.out.Unlock()
				if werr != nil {
					// the backend is gone: nobody will read the rest
					s.kill()
				}
			}
		}
		if err != nil {
			return total
		}
	}
}

// listen reads the backend's frames: stdin, signals, kill. The end of the
// stream means the backend is gone; nobody can then wait for the process,
// so it dies.
func (s *shepherd) listen() {
	for {
		kind, b, err := ReadFrame(os.Stdin)
		if err != nil {
			s.kill()
			return
		}
		switch kind {
		case FrameStdin:
			if s.stdin != nil {
				if _, err := s.stdin.Write(b); err != nil {
					s.stdin.Close()
					s.stdin = nil
				}
			}
		case FrameEOF:
			if s.stdin != nil {
				s.stdin.Close()
				s.stdin = nil
			}
		case FrameSignal:
			if len(b) == 1 {
				_ = unix.Kill(s.pid, unix.Signal(b[0]))
			}
		case FrameKill:
			s.kill()
		}
	}
}

// kill asks for the process and its tree to die.
func (s *shepherd) kill() {
	s.killOnce.Do(func() { close(s.killTree) })
}

// reap waits for every child: the process (whose status it keeps) and
// the orphans that the subreaper inherits.
func (s *shepherd) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			time.Sleep(10 * time.Millisecond)
		case pid == s.pid:
			s.status = ws
			close(s.exited)
		}
	}
}

// sweep kills everything below the shepherd and everything in the
// process's session sid, and says how many kills it took. Under gVisor an
// orphan goes to init, not to the shepherd (its subreaper), so the
// session finds what the tree walk cannot; a process that left the
// session as well is init's to kill (killOrphans). A kill of what one
// table read shows would miss the children forked meanwhile, so each
// round stops what still runs (SIGSTOP, which no process can catch) and
// kills only once a read shows every one of them stopped: then none can
// fork, and nothing is missed. The sweep ends once the table has shown
// none of them, not even a zombie init has yet to reap, a few times over.
func sweep(sid int) int {
	const quiet = 3 // empty reads in a row
	me := os.Getpid()
	killed := map[int]bool{}
	empty := 0
	for round := 0; round < sweepRounds; round++ {
		table, err := processes()
		if err != nil {
			// an unread table is not an empty one
			empty = 0
			time.Sleep(5 * time.Millisecond)
			continue
		}
		below := map[int]bool{}
		for _, pid := range descendants(table, me) {
			below[pid] = true
		}
		var left []proc
		running := false
		for _, p := range table {
			if p.pid == me || !below[p.pid] && p.sid != sid {
				continue
			}
			left = append(left, p)
			running = running || !p.zombie && !p.stopped
		}
		if len(left) == 0 {
			if empty++; empty >= quiet {
				return len(killed)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		empty = 0
		for _, p := range left {
			switch {
			case p.zombie:
			case running:
				_ = unix.Kill(p.pid, unix.SIGSTOP)
			case unix.Kill(p.pid, unix.SIGKILL) == nil:
				killed[p.pid] = true
			}
		}
		time.Sleep(time.Duration(min(round, 10)) * time.Millisecond)
	}
	return len(killed)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// runExec is "exec NPROC NOFILE FSIZE -- ARGV...": it sets the limits
// and executes ARGV, looking its program up in PATH. A program that is
// missing exits 127 and one that cannot run 126, as a shell says.
func runExec(args []string) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: airlock-k8s-agent exec NPROC NOFILE FSIZE -- ARGV...")
		return 125
	}
	lims := []struct {
		res int
		arg string
	}{{unix.RLIMIT_NPROC, args[0]}, {unix.RLIMIT_NOFILE, args[1]}, {unix.RLIMIT_FSIZE, args[2]}, {unix.RLIMIT_CORE, "0"}}
	for _, l := range lims {
		v, err := strconv.ParseUint(l.arg, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock: limit %q: %v\n", l.arg, err)
			return 125
		}
		if v == 0 && l.res != unix.RLIMIT_CORE {
			continue
		}
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			fmt.Fprintf(os.Stderr, "airlock: setrlimit %d: %v\n", l.res, err)
			return 125
		}
	}
	argv := args[4:]
	prog, err := lookPath(argv[0])
	if err == nil {
		err = unix.Exec(prog, argv, os.Environ())
	}
	switch err {
	case unix.ENOENT, unix.ENOTDIR:
		fmt.Fprintf(os.Stderr, "airlock: %s: not found\n", argv[0])
		return 127
	}
	fmt.Fprintf(os.Stderr, "airlock: %s: cannot run: %v\n", argv[0], err)
	return 126
}

// lookPath finds name in PATH the way a shell does; a name with a slash
// is taken as it is.
func lookPath(name string) (string, error) {
	for _, c := range name {
		if c == '/' {
			return name, nil
		}
	}
	var first error
	for _, dir := range splitList(os.Getenv("PATH")) {
		p := dir + "/" + name
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			if unix.Access(p, unix.X_OK) == nil {
				return p, nil
			}
			if first == nil {
				first = unix.EACCES
			}
		}
	}
	if first != nil {
		return "", first
	}
	return "", unix.ENOENT
}

func splitList(path string) []string {
	var out []string
	start := 0
	for k := 0; k <= len(path); k++ {
		if k == len(path) || path[k] == ':' {
			if dir := path[start:k]; dir != "" {
				out = append(out, dir)
			} else {
				out = append(out, ".")
			}
			start = k + 1
		}
	}
	return out
}
