package microvm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"golang.org/x/sys/unix"
)

// arg0KVMProbe in argv[0] makes this binary run probeKVM and exit: a child
// process, so that a KVM_RUN that never returns (nested virtualisation
// that hangs) costs a kill, not a stuck thread of airlock's.
const arg0KVMProbe = "airlock-microvm-kvmprobe"

func init() {
	if len(os.Args) > 0 && os.Args[0] == arg0KVMProbe {
		if err := probeKVM(); err != nil {
			fmt.Fprint(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// kvmProbeTimeout bounds the probe: a guest that halts at once takes
// milliseconds.
const kvmProbeTimeout = 5 * time.Second

// kvmUsable tells whether /dev/kvm runs a guest here: a child process
// makes a machine whose first instruction halts it, and must see it halt
// in time. A /dev/kvm that opens but never runs a guest (nested KVM
// under some hypervisors) is unusable.
func kvmUsable(ctx context.Context) error {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return fmt.Errorf("no /dev/kvm")
	}
	ctx, cancel := context.WithTimeout(ctx, kvmProbeTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{arg0KVMProbe}
	cmd.Env = []string{}
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("/dev/kvm did not run a test guest within %v (nested virtualisation that hangs?)", kvmProbeTimeout)
	case err != nil:
		return fmt.Errorf("/dev/kvm cannot run a guest: %s", strings.TrimSpace(stderr.String()))
	}
	return nil
}

// KVM ioctls (linux/kvm.h).
const (
	kvmGetAPIVersion     = 0xAE00
	kvmCreateVM          = 0xAE01
	kvmGetVCPUMmapSize   = 0xAE04
	kvmCreateVCPU        = 0xAE41
	kvmSetUserMemRegion  = 0x4020AE46
	kvmRun               = 0xAE80
	kvmExitHLT           = 5
	kvmExitReasonOffset  = 8
	resetVectorPageBase  = 0xffff0000
	resetVectorPageBytes = 0x10000
)

// probeKVM makes a machine with one vCPU whose memory holds HLT at the
// reset vector, runs it, and checks that it halted.
func probeKVM() error {
	ioctl := func(fd int, req, arg uintptr) (uintptr, error) {
		r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
		if e != 0 {
			return 0, e
		}
		return r, nil
	}
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fmt.Errorf("KVM API version %d: %v", v, err)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, resetVectorPageBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	mem[resetVectorPageBytes-16] = 0xf4 // hlt, at 0xfffffff0
	region := struct {
		slot, flags           uint32
		guestPhys, size, addr uint64
	}{0, 0, resetVectorPageBase, resetVectorPageBytes, uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(int(vmfd), kvmSetUserMemRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}
	vcpu, err := ioctl(int(vmfd), kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	run, err := unix.Mmap(int(vcpu), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	if _, err := ioctl(int(vcpu), kvmRun, 0); err != nil {
		return fmt.Errorf("KVM_RUN: %w", err)
	}
	if reason := *(*uint32)(unsafe.Pointer(&run[kvmExitReasonOffset])); reason != kvmExitHLT {
		return fmt.Errorf("the test guest exited for reason %d, not a halt", reason)
	}
	return nil
}

// kvmBootTimeout bounds the probe boot: KVM boots the guest to its agent
// in about a second.
const kvmBootTimeout = 20 * time.Second

// kvmBoots tells whether a real guest boots with KVM: some hosts' /dev/kvm
// runs the halting test guest of kvmUsable but hangs the guest kernel
// (nested virtualisation on this project's machines). A probe machine
// without a disk boots until its agent says hello. The verdict is kept in
// the cache folder per host kernel, QEMU binary and guest kernel, so that
// only the first start on a host pays for it.
func (b *Backend) kvmBoots(ctx context.Context, h *hostInfo) error {
	var u unix.Utsname
	_ = unix.Uname(&u)
	qst, _ := os.Stat(h.qemu)
	key := fmt.Sprintf("%s|%s|%v|%d|%s", unix.ByteSliceToString(u.Release[:]), h.qemu, qst.ModTime().UnixNano(), qst.Size(), h.kernel.Release)
	sum := sha256.Sum256([]byte(key))
	verdict := filepath.Join(b.opts.CacheDir, "kvm-"+hex.EncodeToString(sum[:8]))
	if v, err := os.ReadFile(verdict); err == nil {
		if s := strings.TrimSpace(string(v)); s != "ok" {
			return errors.New(strings.TrimPrefix(s, "no: "))
		}
		return nil
	}
	err := b.probeBoot(ctx, h)
	v := "ok\n"
	if err != nil {
		v = "no: " + err.Error() + "\n"
	}
	if os.MkdirAll(b.opts.CacheDir, 0o755) == nil {
		_ = os.WriteFile(verdict, []byte(v), 0o644)
	}
	return err
}

func (b *Backend) probeBoot(ctx context.Context, h *hostInfo) error {
	initramfs, err := b.cache.initramfs(h.kernel)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, kvmBootTimeout)
	defer cancel()
	spec := machineSpec{qemu: h.qemu, accel: AccelKVM, transport: TransportSerial, memMiB: 256, cpus: 1,
		name: namePrefix + hostdir.Owner() + "-kvmprobe", assets: assets{kernel: h.kernel, initramfs: initramfs}}
	m, err := startMachine(ctx, spec, nil)
	if err != nil {
		return err
	}
	defer m.kill()
	hello := make(chan struct{}, 1)
	c := wire.NewConn(m.conn, wire.Host, func(b []byte) error {
		if msg, err := wire.Decode(b); err == nil && msg.Op == wire.OpHello {
			select {
			case hello <- struct{}{}:
			default:
			}
		}
		return nil
	})
	defer c.Close()
	select {
	case <-hello:
		return nil
	case <-m.dead:
		return fmt.Errorf("QEMU with KVM exited before its guest booted: %s", lastLine(m.console.String()))
	case <-ctx.Done():
		return fmt.Errorf("a guest did not boot with KVM within %v (nested virtualisation that hangs?)", kvmBootTimeout)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
