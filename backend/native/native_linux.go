package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// Backend creates native sandboxes.
type Backend struct {
	opts     Options
	hostOnce sync.Once
	host     *hostInfo

	// The pool of prestarted sandboxes (Options.Prestart).
	poolOnce  sync.Once
	pool      chan *instance
	refill    chan struct{}
	closing   chan struct{}
	closeOnce sync.Once
	filler    sync.WaitGroup
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a native backend. Probing the host happens on first use.
func New(opts Options) *Backend {
	if opts.CgroupParent == "" {
		opts.CgroupParent = "airlock"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts, closing: make(chan struct{})}
}

// Name is "native".
func (b *Backend) Name() string { return "native" }

// Features: everything but TTY, pause and checkpoint; files through init.
func (b *Backend) Features() sandbox.Features {
	return sandbox.Features{Egress: true, ConcurrentProcesses: true, KeepAlive: true, Signals: true,
		Files: sandbox.FilesHostDir, SurvivesOOM: true}
}

func (b *Backend) hostInfo() *hostInfo {
	b.hostOnce.Do(func() { b.host = probeHost(b.opts.CgroupParent, b.opts.TrackUnified) })
	return b.host
}

// Capabilities reports each layer's mechanism on this host.
func (b *Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	return sandbox.Capabilities{Backend: b.Name(), Mechanisms: b.hostInfo().mechanisms()}
}

// Probe fails when the native backend cannot run here at all.
func (b *Backend) Probe(ctx context.Context) error { return b.hostInfo().probeError() }

// CleanupStale removes what sandboxes of dead airlock processes left (their
// cgroups, wherever they were placed); it returns what it removed.
func (b *Backend) CleanupStale(ctx context.Context) []string {
	h := b.hostInfo()
	if h.cgroupErr != nil {
		return nil
	}
	removed := h.cgroups.cleanupStale()
	for _, r := range removed {
		b.opts.Logger.Info("removed leftover cgroup", "path", r)
	}
	return removed
}

// booted returns a booted instance: a prestarted one when the pool has
// one (and asks for a replacement), else a fresh one.
func (b *Backend) booted(h *hostInfo) (*instance, error) {
	if b.opts.Prestart <= 0 {
		return b.boot(h)
	}
	b.poolOnce.Do(func() {
		b.pool = make(chan *instance, b.opts.Prestart)
		b.refill = make(chan struct{}, 1)
		b.filler.Add(1)
		go b.fill(h)
	})
	for {
		select {
		case i := <-b.pool:
			select {
			case <-i.dead: // its init died while it waited
				_ = i.Destroy(context.Background())
				continue
			default:
				// The replacement is started when this sandbox is
				// destroyed, so that it does not compete for the CPU
				// with the commands this one runs.
				i.fromPool = true
				return i, nil
			}
		default:
			b.askRefill()
			return b.boot(h)
		}
	}
}

// askRefill wakes the pool's filler.
func (b *Backend) askRefill() {
	select {
	case b.refill <- struct{}{}:
	default:
	}
}

// Prestarted says how many sandboxes wait in the pool now.
func (b *Backend) Prestarted() int {
	if b.pool == nil {
		return 0
	}
	return len(b.pool)
}

// fill keeps the pool full until Close.
func (b *Backend) fill(h *hostInfo) {
	defer b.filler.Done()
	for {
		for len(b.pool) < cap(b.pool) {
			i, err := b.boot(h)
			if err == nil {
				if err = i.awaitHello(); err != nil {
					_ = i.Destroy(context.Background())
				}
			}
			if err != nil {
				b.opts.Logger.Warn("prestarting a sandbox failed", "err", err)
				break
			}
			select {
			case b.pool <- i:
			case <-b.closing:
				_ = i.Destroy(context.Background())
				return
			}
		}
		select {
		case <-b.refill:
		case <-b.closing:
			return
		}
	}
}

// Close destroys the prestarted sandboxes and stops prestarting more.
// Sandboxes already handed out by Create are not touched.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() { close(b.closing) })
	b.filler.Wait()
	var errs []error
	if b.pool != nil {
		for len(b.pool) > 0 {
			errs = append(errs, (<-b.pool).Destroy(context.Background()))
		}
	}
	return errors.Join(errs...)
}

// The sandbox user inside.
const (
	sandboxUID = 1000
	sandboxGID = 1000
)

// Create starts a sandbox: namespaces, root, cgroup, and init waiting for
// processes.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	h := b.hostInfo()
	if err := h.probeError(); err != nil {
		return nil, err
	}
	pol, err := spec.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	weak := b.Capabilities(ctx).Weakened()
	if err := pol.RefuseWeak("this host", weak); err != nil {
		return nil, err
	}
	id, err := hostdir.PickID(spec.ID)
	if err != nil {
		return nil, err
	}
	inst, err := b.booted(h)
	if err != nil {
		return nil, err
	}
	// The plan is made while init starts.
	plan, err := rootPlan(spec.Image)
	if err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	inst.id, inst.policy, inst.weakened, inst.imageEnv = id, pol, weak, spec.Image.Env
	if err := inst.configure(ctx, h, plan); err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	b.opts.Logger.Debug("sandbox created", "id", id, "image", spec.Image.Name)
	return inst, nil
}

// rootPlan turns the image into the plan of the sandbox's root.
func rootPlan(img sandbox.Image) ([]nsinit.RootEntry, error) {
	if img.IsHost() {
		return hostPlan(sandboxUID, sandboxGID)
	}
	return dirPlan(img.RootFS)
}

// initCommand builds the command that starts init in fresh namespaces.
// As root, base is the host id that the sandbox's root maps to (see
// leaseIDs); rootless, it is ignored.
func initCommand(h *hostInfo, ctrl *os.File, stderr io.Writer, base int) *exec.Cmd {
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{nsinit.Arg0},
		// One P keeps init's thread count small and the same on any host.
		Env:        []string{"GOMAXPROCS=1"},
		ExtraFiles: []*os.File{ctrl},
		Stderr:     stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
				unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		},
	}
	sys := cmd.SysProcAttr
	if h.root {
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 1}, {ContainerID: sandboxUID, HostID: base + sandboxUID, Size: 1}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 1}, {ContainerID: sandboxGID, HostID: base + sandboxGID, Size: 1}}
		sys.GidMappingsEnableSetgroups = true
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0}
		return cmd
	}
	// Rootless: only our own ids can be mapped, so init runs as the
	// sandbox user and keeps its capabilities in the new namespace as
	// ambient ones; the workload drops them all.
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: sandboxUID, HostID: h.uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: sandboxGID, HostID: h.gid, Size: 1}}
	sys.Credential = &syscall.Credential{Uid: sandboxUID, Gid: sandboxGID, NoSetGroups: true}
	for c := uintptr(0); c <= uintptr(lastCap()); c++ {
		sys.AmbientCaps = append(sys.AmbientCaps, c)
	}
	return cmd
}

// becomeOwner makes the calling OS thread, as root, take on the host id
// owner as its user and group while keeping its capabilities, so that the
// user namespace it creates next belongs to owner, not to root: the
// kernel charges per-user counts made inside (inotify, queued signals,
// message queues) to the namespace's owner. The thread keeps the
// capabilities it needs to write the namespace's id maps. It must never
// run anything else: the caller keeps it locked until it exits. owner -1
// changes nothing.
func becomeOwner(owner int) error {
	if owner < 0 {
		return nil
	}
	const secbitNoSetuidFixup = 1 << 2
	if _, _, e := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitNoSetuidFixup, 0); e != 0 {
		return fmt.Errorf("securebits: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(owner), uintptr(owner), 0); e != 0 {
		return fmt.Errorf("setresgid %d: %w", owner, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(owner), uintptr(owner), 0); e != 0 {
		return fmt.Errorf("setresuid %d: %w", owner, e)
	}
	return nil
}

// setMemfdNoexec sets vm.memfd_noexec to 2 in the pid namespace of init
// (pid): no memfd made there can ever be executed. The value is per pid
// namespace and only host root may write it, from inside that namespace:
// a locked thread joins init's pid namespace for its children and starts
// a writer there: the host's sh, which starts in a millisecond, or, on a
// host without one, this binary (nsinit.Arg0Sysctl).
func setMemfdNoexec(pid int) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's pid namespace for children changes
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pid))
		if err != nil {
			done <- fmt.Errorf("memfd_noexec: %w", err)
			return
		}
		err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWPID)
		ns.Close()
		if err != nil {
			done <- fmt.Errorf("memfd_noexec: join the sandbox's pid namespace: %w", err)
			return
		}
		cmd := exec.Command("/proc/self/exe")
		cmd.Args = []string{nsinit.Arg0Sysctl}
		if sh, err := exec.LookPath("/bin/sh"); err == nil {
			cmd = exec.Command(sh, "-c", "echo 2 > /proc/sys/vm/memfd_noexec")
		}
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("memfd_noexec: %w: %s", err, strings.TrimSpace(string(out)))
		}
		done <- err
	}()
	return <-done
}

// lastCap is the highest capability number this kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	var n int
	if _, err := fmt.Sscan(string(b), &n); err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}

// runLocked runs start and then wait on one OS thread that stays locked
// for the child's whole life: the kernel sends init its parent-death
// signal when the thread that forked it exits, so that thread must not
// exit before init does. The thread is never unlocked: start may change
// its credentials (becomeOwner), so it exits with the goroutine.
func runLocked(start func() error, wait func()) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := start()
		started <- err
		if err == nil {
			wait()
		}
	}()
	return <-started
}

// waitTimeout bounds how long Destroy waits for init to be reaped.
const waitTimeout = 10 * time.Second
