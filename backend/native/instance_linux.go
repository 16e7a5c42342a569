package native

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// instance is one native sandbox, seen from the supervisor.
type instance struct {
	id       string
	backend  *Backend
	policy   sandbox.Policy
	weakened []string
	imageEnv map[string]string // the image's own environment
	fromPool bool              // came prestarted: its Destroy asks for a replacement

	cmd      *exec.Cmd
	initErr  *command.CapBuffer // init's stderr, for error messages
	ch       *nsinit.Channel
	cg       *cgroup  // nil when cgroups are unavailable
	ids      *idLease // the host id range; nil rootless
	hostRoot int      // host uid and gid of the sandbox's root
	dead     chan struct{}
	placed   chan struct{} // closed once init is in its v1 cgroup folders; nil before boot
	noexec   chan error    // vm.memfd_noexec's outcome, once
	greeted  bool          // init's hello was read
	files    files

	seq     atomic.Uint64
	cgSeq   atomic.Uint64   // numbers the process folders
	spare   chan procFolder // the next process's folder, prepared; nil without cgroups
	mu      sync.Mutex
	pending map[uint64]chan reply
	gone    error    // set once the control channel failed
	outDir  *os.File // /workspace/output, from init; nil once destroyed
	egress  *os.File // the egress listener init opened; nil once taken
	done    chan struct{}
	err     error // why done is closed

	procs      sync.WaitGroup // processes whose sweep and cleanup still run
	destroy    sync.Once
	destroyErr error
}

var (
	_ sandbox.Instance        = (*instance)(nil)
	_ sandbox.OutputDirOpener = (*instance)(nil)
	_ sandbox.NetworkAttacher = (*instance)(nil)
)

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// Done is closed when the sandbox has ended.
func (i *instance) Done() <-chan struct{} { return i.done }

// Err says why the sandbox ended: ErrDestroyed, or a cause wrapping
// ErrDied when init died by itself.
func (i *instance) Err() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.err
}

// end closes done once, with err as the reason.
func (i *instance) end(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.err == nil {
		i.err = err
		close(i.done)
	}
}

// boot creates the cgroup and starts init in new namespaces, owned by a
// host id of the sandbox's own; init then waits for its config. A booted
// instance may wait in the backend's pool.
func (b *Backend) boot(h *hostInfo) (*instance, error) {
	i := &instance{backend: b, pending: map[uint64]chan reply{}, dead: make(chan struct{}), done: make(chan struct{})}
	if err := i.bootInit(h); err != nil {
		_ = i.Destroy(context.Background())
		return nil, err
	}
	return i, nil
}

func (i *instance) bootInit(h *hostInfo) error {
	i.hostRoot = h.uid
	if h.root {
		lease, err := leaseIDs()
		if err != nil {
			return err
		}
		i.ids, i.hostRoot = lease, lease.base
	}
	if h.cgroupErr == nil {
		cg, err := h.cgroups.create(hostdir.Owner() + "-" + hostdir.NewID())
		if err != nil {
			return err
		}
		i.cg = cg
		if err := cg.prepare(i.hostRoot); err != nil {
			return err
		}
	}
	ours, theirs, err := nsinit.SocketPair()
	if err != nil {
		return err
	}
	i.initErr = command.NewCapBuffer(16<<10, nil)
	i.cmd = initCommand(h, theirs, i.initErr, i.hostRoot)
	if i.cg != nil {
		dir, err := i.cg.initDir()
		if err != nil {
			theirs.Close()
			ours.Close()
			return err
		}
		if dir != nil {
			defer dir.Close()
			i.cmd.SysProcAttr.UseCgroupFD, i.cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
		}
	}
	owner := -1
	if h.root {
		owner = i.hostRoot
	}
	err = runLocked(func() error {
		if err := becomeOwner(owner); err != nil {
			return err
		}
		return i.cmd.Start()
	}, func() {
		_ = i.cmd.Wait()
		close(i.dead)
	})
	theirs.Close()
	if err != nil {
		ours.Close()
		close(i.dead)
		return fmt.Errorf("start sandbox init: %w", err)
	}
	if i.ch, err = nsinit.NewChannel(ours); err != nil {
		return err
	}
	// Init's move into its v1 folders runs beside everything else: a
	// migration waits for an RCU grace period on most hosts. Until it
	// lands, init's own threads count against the supervisor's cgroup;
	// every command starts in its own folder regardless (nsinit.ExecSpec).
	i.placed = make(chan struct{})
	go func() {
		defer close(i.placed)
		if i.cg != nil {
			if err := i.cg.placeInit(i.cmd.Process.Pid); err != nil {
				i.backend.opts.Logger.Warn("moving init into its cgroup", "err", err)
			}
		}
	}()
	// vm.memfd_noexec is set beside init's start; configure waits for it
	// before init takes its config.
	i.noexec = make(chan error, 1)
	if h.root && h.memfdNoexec {
		go func() { i.noexec <- setMemfdNoexec(i.cmd.Process.Pid) }()
	} else {
		i.noexec <- nil
	}
	return nil
}

// awaitHello waits for init's hello, sent once its runtime is up. A
// prestarted sandbox waits for it before it joins the pool; Create sends
// the config first and reads the hello after, so that the config is
// prepared while init starts (the channel holds both).
func (i *instance) awaitHello() error {
	if i.greeted {
		return nil
	}
	m, files, err := i.ch.Recv()
	nsinit.CloseAll(files)
	if err != nil || m.Op != nsinit.OpHello {
		return fmt.Errorf("sandbox init did not start: %v %q%s", err, m.Op, i.initStderr())
	}
	i.greeted = true
	return nil
}

// configure sets the policy's cgroup limits, hands init its root plan and
// limits, and waits until the root is built.
func (i *instance) configure(ctx context.Context, h *hostInfo, plan []nsinit.RootEntry) error {
	lim := i.policy.Limits
	var err error
	if i.cg != nil {
		if err := i.cg.setLimits(cgLimits{memory: lim.MemoryBytes, cpus: lim.CPUs, pids: lim.Pids,
			initMemory: initMemory + lim.InputBytes + lim.DiskBytes}); err != nil {
			return err
		}
	}
	cfg := &nsinit.Config{
		Hostname: nsinit.Hostname, Root: plan, UID: sandboxUID, GID: sandboxGID,
		DiskBytes: lim.DiskBytes, DiskInodes: lim.DiskInodes, InputBytes: lim.InputBytes,
		Limits: i.sandboxLimits(h), Sysctls: sandboxSysctls(lim.Pids), SweepByInit: i.cg == nil,
	}
	if i.policy.Network.Enabled() {
		cfg.EgressPort = egressPort
	}
	// No process may start before memfds are refused execution.
	if err := <-i.noexec; err != nil {
		return err
	}
	var binds []*os.File
	if h.root {
		if binds, err = cloneBinds(cfg.Root); err != nil {
			return err
		}
	} else if err := markBinds(cfg.Root); err != nil {
		return err
	}
	err = i.ch.Send(nsinit.Message{Op: nsinit.OpConfig, Config: cfg}, binds...)
	nsinit.CloseAll(binds)
	if err != nil {
		return fmt.Errorf("build sandbox: %w%s", err, i.initStderr())
	}
	if i.cg != nil {
		i.spare = make(chan procFolder, 1)
		i.prepareFolder()
	}
	ready := make(chan error, 1)
	go func() {
		if err := i.awaitHello(); err != nil {
			ready <- err
			return
		}
		m, files, err := i.ch.Recv()
		want := 1
		if cfg.EgressPort > 0 {
			want = 2
		}
		switch {
		case err != nil:
			ready <- err
		case m.Op != nsinit.OpReady:
			nsinit.CloseAll(files)
			ready <- fmt.Errorf("unexpected %q from init", m.Op)
		case m.Error != "":
			nsinit.CloseAll(files)
			ready <- errors.New(m.Error)
		case len(files) != want:
			nsinit.CloseAll(files)
			ready <- fmt.Errorf("init passed %d descriptors, want %d", len(files), want)
		default:
			i.outDir = files[0]
			if want == 2 {
				i.egress = files[1]
			}
			ready <- nil
		}
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("build sandbox: %w%s", err, i.initStderr())
	}
	i.files = files{i}
	go i.readLoop()
	return nil
}

// sandboxSysctls are the per-namespace budgets init sets before anything
// runs: what the code may hold of the kernel's per-user counts, so that
// none of it falls on the host's accounts or starves other sandboxes. No
// namespace may be made inside but the cgroup namespace each process
// starts in (pids bounds them); seccomp refuses the calls besides.
func sandboxSysctls(pids int) [][2]string {
	return [][2]string{
		{"user/max_inotify_instances", "64"},
		{"user/max_inotify_watches", "16384"},
		{"user/max_fanotify_groups", "0"},
		{"user/max_fanotify_marks", "0"},
		{"user/max_user_namespaces", "0"},
		{"user/max_mnt_namespaces", "0"},
		{"user/max_pid_namespaces", "0"},
		{"user/max_net_namespaces", "0"},
		{"user/max_ipc_namespaces", "0"},
		{"user/max_uts_namespaces", "0"},
		{"user/max_cgroup_namespaces", strconv.Itoa(pids + 8)},
		{"user/max_time_namespaces", "0"},
	}
}

// egressPort is where the proxy listens on the sandbox's lo.
const egressPort = 3128

// ListenEgress hands over the listening socket init opened on the
// sandbox's 127.0.0.1:3128; it can be taken once.
func (i *instance) ListenEgress(ctx context.Context) (net.Listener, error) {
	i.mu.Lock()
	f := i.egress
	i.egress = nil
	i.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("egress: the sandbox has no egress rules, or its listener was taken: %w", sandbox.ErrInvalid)
	}
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("egress listener: %w", err)
	}
	return l, nil
}

// initStderr returns what init printed, for error messages.
func (i *instance) initStderr() string {
	if i.initErr == nil || i.initErr.String() == "" {
		return ""
	}
	return " (init: " + strings.TrimSpace(i.initErr.String()) + ")"
}

// deadErr says that init is gone, with the first line it printed, if any
// (a Go runtime's fatal error, for one): it waits a moment for init to be
// reaped, which ends the copy of its stderr.
func (i *instance) deadErr() error {
	select {
	case <-i.dead:
	case <-time.After(time.Second):
	}
	first, _, _ := strings.Cut(strings.TrimSpace(i.initErr.String()), "\n")
	if first == "" {
		return fmt.Errorf("sandbox init exited: %w", sandbox.ErrDied)
	}
	return fmt.Errorf("sandbox init exited (init: %s): %w", first, sandbox.ErrDied)
}

// readLoop hands each reply from init to the request waiting for it. When
// the channel fails, init is gone: the sandbox died by itself, unless it
// was being destroyed.
func (i *instance) readLoop() {
	for {
		m, files, err := i.ch.Recv()
		if err != nil {
			gone := i.deadErr()
			i.mu.Lock()
			if i.gone == nil {
				i.gone = gone
			}
			gone = i.gone
			for seq, c := range i.pending {
				close(c)
				delete(i.pending, seq)
			}
			i.mu.Unlock()
			i.end(gone)
			return
		}
		i.mu.Lock()
		c := i.pending[m.Seq]
		delete(i.pending, m.Seq)
		i.mu.Unlock()
		if c != nil {
			c <- reply{m, files}
		} else {
			nsinit.CloseAll(files)
		}
	}
}

// reply is one answer from init with the descriptors it carried.
type reply struct {
	nsinit.Message
	files []*os.File
}

// request sends one message to init and waits for its reply. An error
// reply is returned as the reply, not as an error. A zero m.Seq gets a
// fresh number; a process's start carries the process's own.
func (i *instance) request(ctx context.Context, m nsinit.Message, files ...*os.File) (nsinit.Message, error) {
	if m.Seq == 0 {
		m.Seq = i.seq.Add(1)
	}
	c := make(chan reply, 1)
	i.mu.Lock()
	if i.gone != nil {
		i.mu.Unlock()
		return nsinit.Message{}, i.gone
	}
	i.pending[m.Seq] = c
	i.mu.Unlock()
	if err := i.ch.Send(m, files...); err != nil {
		i.mu.Lock()
		delete(i.pending, m.Seq)
		i.mu.Unlock()
		return nsinit.Message{}, err
	}
	select {
	case r, ok := <-c:
		if !ok {
			return nsinit.Message{}, i.goneErr()
		}
		nsinit.CloseAll(r.files)
		return r.Message, nil
	case <-ctx.Done():
		i.mu.Lock()
		delete(i.pending, m.Seq)
		i.mu.Unlock()
		return nsinit.Message{}, ctx.Err()
	}
}

// goneErr is why requests fail once init's channel closed.
func (i *instance) goneErr() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone != nil {
		return i.gone
	}
	return sandbox.ErrDestroyed
}

// OpenOutputDir opens /workspace/output for the artifact filter.
func (i *instance) OpenOutputDir(ctx context.Context) (*os.File, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.outDir == nil {
		return nil, fmt.Errorf("output folder: %w", sandbox.ErrDestroyed)
	}
	fd, err := unix.FcntlInt(i.outDir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	return os.NewFile(uintptr(fd), nsinit.OutputDir), nil
}

// Files reaches the sandbox's files through init.
func (i *instance) Files() sandbox.Files { return &i.files }

// Destroy kills init, which takes every process of the sandbox with it,
// and removes the cgroup. Mounts and namespaces die with the processes.
func (i *instance) Destroy(ctx context.Context) error {
	i.destroy.Do(func() {
		i.mu.Lock()
		if i.gone == nil {
			i.gone = fmt.Errorf("sandbox %s: %w", i.id, sandbox.ErrDestroyed)
		}
		i.mu.Unlock()
		if i.cmd != nil && i.cmd.Process != nil {
			_ = i.cmd.Process.Kill()
		}
		if i.ch != nil {
			i.ch.Close()
		}
		select {
		case <-i.dead:
		case <-time.After(waitTimeout):
			i.destroyErr = fmt.Errorf("sandbox %s: init not reaped after %v", i.id, waitTimeout)
		}
		i.procs.Wait()
		if i.placed != nil {
			<-i.placed
		}
		select {
		case f := <-i.spare: // removed with the tree below
			f.close()
		default:
		}
		i.mu.Lock()
		for _, f := range []**os.File{&i.outDir, &i.egress} {
			if *f != nil {
				(*f).Close()
				*f = nil
			}
		}
		i.mu.Unlock()
		if i.cg != nil {
			i.destroyErr = errors.Join(i.destroyErr, i.cg.remove())
		}
		i.ids.release()
		i.end(fmt.Errorf("sandbox %s: %w", i.id, sandbox.ErrDestroyed))
		if i.fromPool {
			i.backend.askRefill()
		}
	})
	return i.destroyErr
}
