package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/watchdog"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// The sandbox user, and the user of the container's pid 1, which
// commands cannot signal.
const (
	sandboxUID = 1000
	sandboxGID = 1000
	keeperUID  = 65534
)

// KeeperTasks is added to the pids cap for the container's own processes,
// its pid 1.
const KeeperTasks = 2

// Backend creates gVisor sandboxes.
type Backend struct {
	opts     Options
	hostOnce sync.Once
	host     host
	cleaned  sync.Once
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a gvisor backend. The host is probed on first use.
func New(opts Options) *Backend {
	if opts.StateDir == "" {
		opts.StateDir = "/run/airlock/gvisor"
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = "airlock-gvisor"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts}
}

// Name is "gvisor".
func (b *Backend) Name() string { return "gvisor" }

// Features: everything but TTY, pause and checkpoint; egress through a
// socket bound in; gVisor's own kernel, which the host ends whole at the
// memory cap.
func (b *Backend) Features() sandbox.Features {
	return sandbox.Features{Egress: true, ConcurrentProcesses: true, KeepAlive: true, Signals: true,
		Files: sandbox.FilesHostDir, OwnKernel: true}
}

// Close has nothing to release: each sandbox owns its runsc processes.
func (b *Backend) Close() error { return nil }

// host is what this host gives the backend, probed once.
type host struct {
	runsc   string
	version string
	err     error // why the backend cannot run here, or nil
}

func (b *Backend) probe() host {
	b.hostOnce.Do(func() {
		var h host
		if os.Geteuid() != 0 {
			h.err = fmt.Errorf("gvisor backend: needs root for now: the sandbox's folders are tmpfs mounts and its limits cgroups "+
				"(runsc itself can run rootless): %w", sandbox.ErrUnsupported)
			b.host = h
			return
		}
		path := b.opts.Runsc
		if path == "" {
			path = "runsc"
		}
		var err error
		if h.runsc, err = exec.LookPath(path); err != nil {
			h.err = fmt.Errorf("gvisor backend: runsc not found (%v): %w", err, sandbox.ErrUnsupported)
			b.host = h
			return
		}
		out, err := exec.Command(h.runsc, "--version").CombinedOutput()
		if err != nil {
			h.err = fmt.Errorf("gvisor backend: %s --version: %v %s: %w", h.runsc, err, bytes.TrimSpace(out), sandbox.ErrUnsupported)
		}
		h.version, _, _ = strings.Cut(string(out), "\n")
		b.host = h
	})
	return b.host
}

// Probe fails when runsc cannot be found or run.
func (b *Backend) Probe(ctx context.Context) error { return b.probe().err }

// Capabilities reports each layer's mechanism on this host.
func (b *Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	h := b.probe()
	caps := sandbox.Capabilities{Backend: b.Name()}
	m := func(layer, name string, s sandbox.Strength, detail string) {
		caps.Mechanisms = append(caps.Mechanisms, sandbox.Mechanism{Layer: layer, Name: name, Strength: s, Detail: detail})
	}
	if h.err != nil {
		m("privileges", "user-space kernel", sandbox.Missing, h.err.Error())
		return caps
	}
	m("privileges", "user-space kernel", sandbox.Full, h.version+" at "+h.runsc+": system calls are served by the sentry, not the host kernel")
	m("privileges", "seccomp inside", sandbox.Full, "runsc --oci-seccomp: Docker's default profile made stricter, applied by the sentry")
	m("filesystem", "read-only root", sandbox.Full, "/tmp, /workspace/output, /dev/shm on one tmpfs of the disk cap")
	m("network", "no network", sandbox.Full, "runsc --network=none")
	m("resources", "cgroups", sandbox.Full, "memory without swap, CPU quota, a pids safety net for the sentry")
	m("resources", "pids", sandbox.Full, "RLIMIT_NPROC, enforced by the sentry; no pids_limit_hit report")
	m("resources", "socket buffers", sandbox.Full, "gVisor's network stack keeps socket buffers in the sentry's memory, inside the memory cap")
	m("lifecycle", "sweep", sandbox.Full, "runsc ps finds what a process left; a root helper inside kills it, sparing the trees of live processes")
	m("lifecycle", "watchdog", sandbox.Full, "a host process per sandbox deletes it when airlock dies")
	return caps
}

// flags are runsc's global flags for every call on one sandbox. With
// hostUDS the sandbox may connect to the host's unix sockets that are
// bound into it: the egress proxy's.
func (b *Backend) flags(stateRoot string, hostUDS bool) []string {
	f := []string{"--root", stateRoot, "--network=none", "--oci-seccomp"}
	if hostUDS {
		f = append(f, "--host-uds=open")
	}
	return f
}

// runsc runs one runsc command and returns its stdout; its stderr goes
// into the error. Both go to unnamed files in stateRoot, not pipes: the
// sandbox processes that runsc create starts inherit them and live on.
func (b *Backend) runsc(ctx context.Context, stateRoot string, flags []string, args ...string) ([]byte, error) {
	var files [2]*os.File
	for k := range files {
		fd, err := unix.Open(stateRoot, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("runsc %s: output file: %w", args[0], err)
		}
		files[k] = os.NewFile(uintptr(fd), "runsc-output")
		defer files[k].Close()
	}
	cmd := exec.CommandContext(ctx, b.probe().runsc, append(slices.Clone(flags), args...)...)
	cmd.Stdout, cmd.Stderr = files[0], files[1]
	err := cmd.Run()
	out, _ := readAll(files[0])
	if err != nil {
		msg, _ := readAll(files[1])
		return nil, fmt.Errorf("runsc %s: %w: %s", args[0], err, bytes.TrimSpace(msg))
	}
	return out, nil
}

// readAll reads a file from its start, up to 1 MiB.
func readAll(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// CleanupStale deletes the sandboxes and folders of airlock processes
// that died without doing so, and returns the folders removed.
func (b *Backend) CleanupStale(ctx context.Context) []string {
	removed := hostdir.Stale(b.opts.StateDir, func(dir, id string) { b.stop(ctx, dir, containerID(id)) })
	cgstat.RemoveEmpty(b.opts.CgroupParent)
	for _, r := range removed {
		b.opts.Logger.Info("removed leftover sandbox", "folder", r)
	}
	return removed
}

// stop deletes a sandbox with runsc and, should its state be lost, kills
// the processes that serve it: their command lines name its state folder.
func (b *Backend) stop(ctx context.Context, dir, cid string) {
	stateRoot := filepath.Join(dir, "runsc")
	if _, err := os.Stat(stateRoot); err != nil {
		return
	}
	if _, err := b.runsc(ctx, stateRoot, b.flags(stateRoot, false), "delete", "--force", cid); err != nil {
		b.opts.Logger.Warn("runsc delete", "sandbox", cid, "err", err)
	}
	watchdog.KillByArg(killArg(stateRoot))
}

// killArg is the argument that every runsc process serving the sandbox
// whose state is in stateRoot has.
func killArg(stateRoot string) string { return "--root=" + stateRoot }

// containerID is the runsc container id of a sandbox.
func containerID(id string) string { return "airlock-" + id }

// Create starts a sandbox: its folder, bundle, and a running container.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	h := b.probe()
	if h.err != nil {
		return nil, h.err
	}
	pol, err := spec.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	weak := b.Capabilities(ctx).Weakened()
	if err := pol.RefuseWeak("this host", weak); err != nil {
		return nil, err
	}
	b.cleaned.Do(func() { b.CleanupStale(ctx) })
	id, err := hostdir.PickID(spec.ID)
	if err != nil {
		return nil, err
	}
	inst := newInstance(b, id, pol, weak, spec.Image.Env)
	if err := inst.start(ctx, spec.Image); err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	b.opts.Logger.Debug("sandbox created", "id", id, "image", spec.Image.Name)
	return inst, nil
}
