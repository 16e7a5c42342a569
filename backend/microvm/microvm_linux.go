package microvm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
)

var randReader = rand.Reader

// Backend creates microvm sandboxes.
type Backend struct {
	opts    Options
	cgroups *native.Backend // makes the QEMU processes' cgroups and removes stale ones
	cache   *assetCache

	hostOnce sync.Once
	host     *hostInfo
	cleaned  sync.Once
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a microvm backend. Probing the host happens on first use.
func New(opts Options) *Backend {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 5 * time.Minute
	}
	if opts.WedgeGrace <= 0 {
		opts.WedgeGrace = time.Minute
	}
	if opts.Accel == AccelAuto {
		opts.Accel = os.Getenv("AIRLOCK_MICROVM_ACCEL")
	}
	if opts.KernelDir == "" || opts.CacheDir == "" {
		if dir, err := image.DefaultDir(os.Getenv); err == nil {
			if s, err := image.OpenStore(dir); err == nil {
				if opts.KernelDir == "" {
					opts.KernelDir = s.KernelDir()
				}
				if opts.CacheDir == "" {
					opts.CacheDir = filepath.Join(s.Dir(), ".microvm")
				}
			}
		}
	}
	return &Backend{opts: opts, cache: &assetCache{dir: opts.CacheDir},
		cgroups: native.New(native.Options{CgroupParent: "airlock-microvm", Logger: opts.Logger})}
}

// Name is "microvm".
func (b *Backend) Name() string { return "microvm" }

// Features: everything the native backend inside offers, with files as
// streams and a kernel of the sandbox's own.
func (b *Backend) Features() sandbox.Features {
	return sandbox.Features{Egress: true, ConcurrentProcesses: true, KeepAlive: true, Signals: true,
		Files: sandbox.FilesStream, OwnKernel: true, SurvivesOOM: true}
}

// hostInfo is what this host gives the backend, probed once.
type hostInfo struct {
	qemu      string
	qemuErr   error
	kernel    *image.Kernel
	kernelErr error
	mkfsErr   error
	accel     string
	accelWhy  string // why this accelerator
	tscKHz    uint64
	transport string
	cgroupErr error
}

func (b *Backend) hostInfo(ctx context.Context) *hostInfo {
	b.hostOnce.Do(func() {
		h := &hostInfo{}
		h.qemu = b.opts.QEMU
		if h.qemu == "" {
			h.qemu, h.qemuErr = exec.LookPath("qemu-system-x86_64")
		} else if _, err := os.Stat(h.qemu); err != nil {
			h.qemuErr = err
		}
		if b.opts.KernelDir == "" {
			h.kernelErr = fmt.Errorf("no image store to hold guest kernels (set AIRLOCK_HOME): %w", sandbox.ErrUnsupported)
		} else if h.kernel, h.kernelErr = image.FindKernel(b.opts.KernelDir); h.kernelErr != nil {
			h.kernelErr = kernelError(b.opts.KernelDir, h.kernelErr)
		}
		_, h.mkfsErr = exec.LookPath("mkfs.erofs")
		switch b.opts.Accel {
		case AccelKVM, AccelTCG:
			h.accel, h.accelWhy = b.opts.Accel, "as configured"
		default:
			err := kvmUsable(ctx)
			if err == nil && h.qemuErr == nil && h.kernelErr == nil {
				err = b.kvmBoots(ctx, h)
			}
			if err != nil {
				h.accel, h.accelWhy = AccelTCG, "KVM unusable: "+err.Error()
			} else {
				h.accel, h.accelWhy = AccelKVM, "a probe guest booted with /dev/kvm"
			}
		}
		if h.accel == AccelTCG {
			h.tscKHz = tscKHz()
		}
		switch b.opts.Transport {
		case TransportSerial, TransportVsock:
			h.transport = b.opts.Transport
		default:
			h.transport = TransportSerial
			if _, err := os.Stat("/dev/vhost-vsock"); err == nil {
				h.transport = TransportVsock
			}
		}
		if c, err := b.cgroups.NewHostCgroup(native.HostLimits{MemoryBytes: 64 << 20, CPUs: 1, Pids: 8}); err != nil {
			h.cgroupErr = err
		} else {
			_ = c.Remove()
		}
		b.host = h
	})
	return b.host
}

// transportName is how results and doctor name a transport.
func transportName(t string) string {
	if t == TransportVsock {
		return "virtio-vsock"
	}
	return "virtio-serial"
}

// Capabilities reports the machine's mechanisms on this host. The layers
// inside are the native backend's on the guest's kernel; those weaker
// there are listed in each Result's weakened.
func (b *Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	h := b.hostInfo(ctx)
	m := func(layer, name string, ok bool, strength sandbox.Strength, detail string) sandbox.Mechanism {
		if ok {
			strength = sandbox.Full
		}
		return sandbox.Mechanism{Layer: layer, Name: name, Strength: strength, Detail: detail}
	}
	kernel := "guest kernel: " + errString(h.kernelErr)
	if h.kernel != nil {
		kernel = "guest kernel " + h.kernel.Release + " (" + h.kernel.Package + " " + h.kernel.Version + ")"
	}
	qemu := h.qemu
	if h.qemuErr != nil {
		qemu = "qemu-system-x86_64: " + h.qemuErr.Error()
	}
	accel := "accel " + h.accel + ": " + h.accelWhy
	if h.accel == AccelTCG {
		accel += "; TCG is slow (seconds to boot, each instruction translated)"
	}
	cg := "QEMU runs in a cgroup capped at the machine's memory and CPUs"
	if h.cgroupErr != nil {
		cg = "QEMU runs without a cgroup: " + h.cgroupErr.Error()
	}
	mkfs := "the image as a read-only erofs disk, shared by its machines"
	if h.mkfsErr != nil {
		mkfs = "mkfs.erofs (erofs-utils) missing: " + h.mkfsErr.Error()
	}
	return sandbox.Capabilities{Backend: b.Name(), Mechanisms: []sandbox.Mechanism{
		m("isolation", "own kernel", h.kernelErr == nil, sandbox.Missing, kernel),
		m("isolation", "hypervisor", h.qemuErr == nil, sandbox.Missing, qemu+"; "+accel),
		m("filesystem", "image disk", h.mkfsErr == nil, sandbox.Missing, mkfs),
		m("network", "no network device", true, sandbox.Full, "egress only through the proxy, over the "+transportName(h.transport)+" channel"),
		m("resources", "machine", true, sandbox.Full, "vCPUs and memory from the policy; pids, disk and the rest capped inside"),
		m("resources", "qemu cgroup", h.cgroupErr == nil, sandbox.Weaker, cg),
		m("privileges", "qemu seccomp", true, sandbox.Full, "-sandbox on, obsolete, elevateprivileges, spawn and resourcecontrol denied"),
		m("privileges", "inside", true, sandbox.Full, "the native backend's layers on the guest kernel: uid 1000, no capabilities, no_new_privs, seccomp, Landlock, cgroups"),
		m("lifecycle", "dies with airlock", true, sandbox.Full, "QEMU has SIGKILL as its parent-death signal; the next start removes what a killed airlock left"),
	}}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// Probe fails when the backend cannot run here at all.
func (b *Backend) Probe(ctx context.Context) error {
	h := b.hostInfo(ctx)
	switch {
	case h.qemuErr != nil:
		return fmt.Errorf("microvm backend: qemu-system-x86_64 (Debian's qemu-system-x86): %v: %w", h.qemuErr, sandbox.ErrUnsupported)
	case h.kernelErr != nil:
		return h.kernelErr
	case h.mkfsErr != nil:
		return fmt.Errorf("microvm backend: mkfs.erofs (Debian's erofs-utils): %v: %w", h.mkfsErr, sandbox.ErrUnsupported)
	case b.opts.CacheDir == "":
		return fmt.Errorf("microvm backend: no cache folder (set AIRLOCK_HOME): %w", sandbox.ErrUnsupported)
	}
	return nil
}

// CleanupStale kills the QEMU processes of airlock processes that died
// (they die with their parent, so this finds only those a stuck kernel
// kept) and removes their cgroups.
func (b *Backend) CleanupStale(ctx context.Context) []string {
	var removed []string
	for _, p := range staleMachines() {
		if pr, err := os.FindProcess(p.pid); err == nil {
			_ = pr.Kill()
		}
		removed = append(removed, fmt.Sprintf("qemu process %d (%s)", p.pid, p.name))
	}
	for _, r := range b.cgroups.CleanupStale(ctx) {
		b.opts.Logger.Info("removed leftover cgroup", "path", r)
		removed = append(removed, r)
	}
	return removed
}

// namePrefix starts the name of every machine: airlock-microvm-OWNER-ID.
const namePrefix = "airlock-microvm-"

type qemuProcess struct {
	pid  int
	name string
}

// machines lists the QEMU processes of this backend's naming, and
// staleMachines those whose owner is gone.
func machines() []qemuProcess {
	var out []qemuProcess
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for k := 0; k+1 < len(args); k++ {
			if args[k] == "-name" && strings.HasPrefix(args[k+1], namePrefix) {
				name, _, _ := strings.Cut(args[k+1], ",")
				var pid int
				fmt.Sscan(e.Name(), &pid)
				out = append(out, qemuProcess{pid: pid, name: name})
			}
		}
	}
	return out
}

func staleMachines() []qemuProcess {
	var out []qemuProcess
	for _, p := range machines() {
		owner, _, ok := hostdir.SplitName(strings.TrimPrefix(p.name, namePrefix))
		if ok && !hostdir.OwnerAlive(owner) {
			out = append(out, p)
		}
	}
	return out
}

// Close releases nothing: machines belong to their instances.
func (b *Backend) Close() error { return nil }

// guestOverheadMiB is the guest's memory beyond the policy's and the
// unpacked initramfs: the kernel and its page structures, the agent and
// the native sandbox's init, with room for the page cache.
const guestOverheadMiB = 160

// qemuOverhead is QEMU's own memory beyond the guest's and its copies of
// the boot files, in its cgroup: its code and heap, and TCG's translation
// cache (tb-size 64 MiB).
const qemuOverhead = 192 << 20

// sizing returns a machine's memory in MiB, its vCPUs and the cap of
// QEMU's cgroup for a policy and the boot files a. The guest keeps the
// policy's memory and inputs in its RAM (as native keeps them in tmpfs),
// unpacks the initramfs into its tmpfs (this binary, tens of MiB in a
// release build), and needs its own overhead; QEMU holds the guest's
// memory, its own, and a copy of the kernel and initramfs for as long as
// the machine runs. The CPU quota is rounded up.
func sizing(l sandbox.Limits, a assets) (memMiB, cpus int, qemuMemory int64, err error) {
	var boot [2]int64
	for k, f := range []string{a.kernel.Image(), a.initramfs} {
		st, err := os.Stat(f)
		if err != nil {
			return 0, 0, 0, err
		}
		boot[k] = st.Size()
	}
	memMiB = int((l.MemoryBytes+l.InputBytes+boot[1]+(1<<20)-1)>>20) + guestOverheadMiB
	qemuMemory = int64(memMiB)<<20 + qemuOverhead + boot[0] + boot[1]
	return memMiB, max(1, int(math.Ceil(l.CPUs))), qemuMemory, nil
}

// Create boots a machine for the sandbox and makes the sandbox inside.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if err := b.Probe(ctx); err != nil {
		return nil, err
	}
	h := b.hostInfo(ctx)
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
	a := assets{kernel: h.kernel}
	if a.initramfs, err = b.cache.initramfs(h.kernel); err != nil {
		return nil, err
	}
	if a.rootfs, err = b.cache.rootfs(ctx, spec.Image); err != nil {
		return nil, err
	}
	touch(a.initramfs)
	mib, cpus, qemuMem, err := sizing(pol.Limits, a)
	if err != nil {
		return nil, err
	}
	ms := machineSpec{qemu: h.qemu, accel: h.accel, transport: h.transport, assets: a, memMiB: mib, cpus: cpus, qemuMemory: qemuMem,
		tscKHz: h.tscKHz, name: namePrefix + hostdir.Owner() + "-" + id}
	inst := &instance{id: id, b: b, policy: pol, imageEnv: spec.Image.Env, weakened: weak,
		details: map[string]string{"accel": h.accel, "transport": transportName(h.transport), "guest_kernel": h.kernel.Release,
			"vcpus": fmt.Sprint(cpus), "memory_mib": fmt.Sprint(mib)},
		pending: map[uint64]chan wire.Msg{}, procs: map[uint64]*process{}, done: make(chan struct{}),
		hello: make(chan *wire.Hello, 1), egressQ: make(chan net.Conn, maxPendingEgress)}
	if err := inst.boot(ctx, ms, h); err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	b.opts.Logger.Debug("sandbox created", "id", id, "image", spec.Image.Name, "accel", h.accel)
	return inst, nil
}

// errBoot wraps failures of a machine's boot.
var errBoot = errors.New("the machine did not boot")
