package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// instance is one native sandbox, seen from the supervisor.
type instance struct {
	id       string
	backend  *Backend
	policy   sandbox.Policy
	weakened []string
	rootless bool
	imageEnv map[string]string // the image's own environment
	fromPool bool              // came prestarted: its Destroy asks for a replacement

	cmd      *exec.Cmd
	initErr  *command.CapBuffer // init's stderr, for error messages
	ch       *nsinit.Channel
	cg       *cgroup       // nil when cgroups are unavailable
	proxy    *egress.Proxy // nil when the network is off
	hostRoot int           // host uid and gid of the sandbox's root; -1 rootless
	outDir   *os.File
	inMount  *os.File      // writable detached mount of /workspace/input
	dead     chan struct{} // closed when init has been reaped

	seq     atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]chan nsinit.Message
	gone    error // set once the control channel failed

	destroy    sync.Once
	destroyErr error
}

var _ sandbox.Instance = (*instance)(nil)

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// boot creates the cgroup and starts init in new namespaces; init then
// waits for its config. A booted instance may wait in the backend's pool.
func (b *Backend) boot(h *hostInfo) (*instance, error) {
	i := &instance{backend: b, rootless: !h.root, pending: map[uint64]chan nsinit.Message{}, dead: make(chan struct{})}
	if err := i.bootInit(h); err != nil {
		_ = i.Destroy(context.Background())
		return nil, err
	}
	return i, nil
}

func (i *instance) bootInit(h *hostInfo) error {
	if h.cgroupErr == nil {
		cg, err := h.cgroups.create(hostdir.Owner() + "-" + hostdir.NewID())
		if err != nil {
			return err
		}
		i.cg = cg
	}
	ours, theirs, err := nsinit.SocketPair()
	if err != nil {
		return err
	}
	i.initErr = command.NewCapBuffer(16<<10, nil)
	i.hostRoot = -1
	if h.root {
		i.hostRoot = hostIDBase()
	}
	i.cmd = initCommand(h, theirs, i.initErr, i.hostRoot)
	err = runLocked(i.cmd.Start, func() {
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
	if i.cg != nil {
		if err := i.cg.addProc(i.cmd.Process.Pid); err != nil {
			return err
		}
	}
	// Init says hello once its runtime is up; a prestarted sandbox is
	// only ready to hand out after that.
	m, files, err := i.ch.Recv()
	nsinit.CloseAll(files)
	if err != nil || m.Op != nsinit.OpHello {
		return fmt.Errorf("sandbox init did not start: %v %q%s", err, m.Op, i.initStderr())
	}
	return nil
}

// configure sets the policy's cgroup limits, hands init its root plan and
// limits, and waits until the root is built.
func (i *instance) configure(ctx context.Context, h *hostInfo, plan []nsinit.RootEntry) error {
	if i.cg != nil {
		lim := i.policy.Limits
		if err := i.cg.setLimits(cgLimits{memory: lim.MemoryBytes, cpus: lim.CPUs, pids: lim.Pids + InitTasks}); err != nil {
			return err
		}
	}
	cfg := &nsinit.Config{
		Hostname: nsinit.Hostname, Root: plan, UID: sandboxUID, GID: sandboxGID,
		DiskBytes: i.policy.Limits.DiskBytes, DiskInodes: i.policy.Limits.DiskInodes,
		Limits: i.sandboxLimits(h),
	}
	if i.proxy != nil {
		cfg.EgressPort = egressPort
	}
	if err := i.ch.Send(nsinit.Message{Op: nsinit.OpConfig, Config: cfg}); err != nil {
		return err
	}
	ready := make(chan error, 1)
	go func() {
		m, files, err := i.ch.Recv()
		switch {
		case err != nil:
			ready <- err
		case m.Op != nsinit.OpReady:
			nsinit.CloseAll(files)
			ready <- fmt.Errorf("unexpected %q from init", m.Op)
		case m.Error != "":
			nsinit.CloseAll(files)
			ready <- errors.New(m.Error)
		case len(files) != 2 && (i.proxy == nil || len(files) != 3):
			nsinit.CloseAll(files)
			ready <- fmt.Errorf("init passed %d descriptors", len(files))
		default:
			i.outDir, i.inMount = files[0], files[1]
			ready <- i.serveEgress(files[2:])
		}
	}()
	var err error
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("build sandbox: %w%s", err, i.initStderr())
	}
	go i.readLoop()
	return nil
}

// egressPort is where the proxy listens on the sandbox's lo.
const egressPort = 3128

// serveEgress starts the proxy on the listening socket init made inside
// the sandbox's network namespace.
func (i *instance) serveEgress(files []*os.File) error {
	if len(files) == 0 {
		return nil
	}
	l, err := net.FileListener(files[0])
	files[0].Close()
	if err != nil {
		return fmt.Errorf("egress listener: %w", err)
	}
	go func() { _ = i.proxy.Serve(context.Background(), l) }()
	return nil
}

// initStderr returns what init printed, for error messages.
func (i *instance) initStderr() string {
	if i.initErr == nil || i.initErr.String() == "" {
		return ""
	}
	return " (init: " + strings.TrimSpace(i.initErr.String()) + ")"
}

// deadErr is errDead with the first line init printed, if any (a Go
// runtime's fatal error, for one): it waits a moment for init to be
// reaped, which ends the copy of its stderr.
func (i *instance) deadErr() error {
	select {
	case <-i.dead:
	case <-time.After(time.Second):
	}
	first, _, _ := strings.Cut(strings.TrimSpace(i.initErr.String()), "\n")
	if first == "" {
		return errDead
	}
	return fmt.Errorf("%w (init: %s)", errDead, first)
}

// readLoop hands each reply from init to the request waiting for it.
func (i *instance) readLoop() {
	for {
		m, files, err := i.ch.Recv()
		nsinit.CloseAll(files)
		if err != nil {
			gone := i.deadErr()
			i.mu.Lock()
			i.gone = gone
			for seq, c := range i.pending {
				close(c)
				delete(i.pending, seq)
			}
			i.mu.Unlock()
			return
		}
		i.mu.Lock()
		c := i.pending[m.Seq]
		delete(i.pending, m.Seq)
		i.mu.Unlock()
		if c != nil {
			c <- m
		}
	}
}

// request sends one message to init and waits for its reply.
// A zero m.Seq gets a fresh number.
func (i *instance) request(ctx context.Context, m nsinit.Message, files ...*os.File) error {
	if m.Seq == 0 {
		m.Seq = i.seq.Add(1)
	}
	c := make(chan nsinit.Message, 1)
	i.mu.Lock()
	if i.gone != nil {
		i.mu.Unlock()
		return i.gone
	}
	i.pending[m.Seq] = c
	i.mu.Unlock()
	if err := i.ch.Send(m, files...); err != nil {
		i.mu.Lock()
		delete(i.pending, m.Seq)
		i.mu.Unlock()
		return err
	}
	select {
	case r, ok := <-c:
		if !ok {
			return i.deadErr()
		}
		if r.Error != "" {
			return errors.New(r.Error)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PutInput stores r as /workspace/input/NAME, read-only inside. The file
// lives in RAM, charged to this process, not to the sandbox's memory cap.
func (i *instance) PutInput(ctx context.Context, name string, r io.Reader) error {
	if i.inMount == nil {
		return sandbox.ErrDestroyed
	}
	return hostdir.WriteInput(ctx, i.inMount, name, r, i.createInput)
}

// createInput creates the file in the input tmpfs. The tmpfs belongs to
// the sandbox's user namespace, where host root has no id, so as root the
// file is created by a thread whose filesystem ids are the sandbox root's.
func (i *instance) createInput(dir *os.File, name string) (*os.File, error) {
	if i.hostRoot < 0 {
		return hostdir.CreateInput(dir, name)
	}
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's ids are changed
		unix.Setfsgid(i.hostRoot)
		unix.Setfsuid(i.hostRoot)
		f, err := hostdir.CreateInput(dir, name)
		done <- result{f, err}
	}()
	r := <-done
	return r.f, r.err
}

// Output opens /workspace/output for the artifact filter.
func (i *instance) Output(ctx context.Context) (*os.File, error) {
	if i.outDir == nil {
		return nil, sandbox.ErrDestroyed
	}
	fd, err := unix.FcntlInt(i.outDir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	return os.NewFile(uintptr(fd), nsinit.OutputDir), nil
}

// Destroy kills init, which takes every process of the sandbox with it,
// and removes the cgroup. Mounts and namespaces die with the processes.
func (i *instance) Destroy(ctx context.Context) error {
	i.destroy.Do(func() {
		if i.cmd != nil && i.cmd.Process != nil {
			_ = i.cmd.Process.Kill()
		}
		if i.ch != nil {
			i.ch.Close()
		}
		if i.proxy != nil {
			_ = i.proxy.Close()
		}
		select {
		case <-i.dead:
		case <-time.After(waitTimeout):
			i.destroyErr = fmt.Errorf("sandbox %s: init not reaped after %v", i.id, waitTimeout)
		}
		for _, f := range []**os.File{&i.outDir, &i.inMount} {
			if *f != nil {
				(*f).Close()
				*f = nil
			}
		}
		if i.cg != nil {
			i.destroyErr = errors.Join(i.destroyErr, i.cg.remove())
		}
		if i.fromPool {
			i.backend.askRefill()
		}
	})
	return i.destroyErr
}

// decodeStatus reads init's report; an empty report means the command
// was killed before init could write one (init itself died).
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
