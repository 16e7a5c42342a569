package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/microvm/guest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"golang.org/x/sys/unix"
)

// machine is one QEMU process and its host channel.
type machine struct {
	cmd     *exec.Cmd
	cg      *native.HostCgroup // nil where the host has no cgroups
	conn    io.ReadWriteCloser // the host end of the channel
	console *tail              // the guest's serial console, its last bytes
	dead    chan struct{}      // closed once QEMU is reaped
}

// machineSpec is what one machine boots.
type machineSpec struct {
	qemu, accel, transport string
	assets                 assets
	memMiB, cpus           int
	qemuMemory             int64  // the cap of QEMU's cgroup, where it has one
	tscKHz                 uint64 // the host's TSC rate, for a TCG guest; 0 lets it calibrate
	name                   string // airlock-OWNER-ID: stale cleanup finds it by that
}

// qemuArgs is QEMU's command line for spec: a microvm machine without
// legacy devices, default devices or a network device; the kernel and
// initramfs given directly; a balloon that reports free pages; the
// image's disk read-only; the channel on descriptor 3 (virtio-serial) or
// a vhost-vsock device with guest cid; the console on descriptor 4;
// QEMU's seccomp sandbox on.
func qemuArgs(spec machineSpec, cid uint32) []string {
	// No legacy timer, interrupt controller or clock: under KVM the
	// guest takes the time from kvmclock; under TCG its rdtsc reads the
	// host's counter, whose rate the host measures and passes on
	// (tsc_early_khz, tsc=reliable), since the kernel cannot calibrate it
	// without a PIT and, on a loaded host, not even with one. The devices
	// are found through ACPI: Debian's kernel does not read virtio-mmio
	// devices from its command line.
	machine := "microvm,pic=off,pit=off,rtc=off,isa-serial=on"
	accel := []string{"-accel", "kvm", "-cpu", "host"}
	var clock []string
	if spec.accel != AccelKVM {
		accel = []string{"-accel", "tcg,tb-size=64", "-cpu", "max"}
		if spec.tscKHz > 0 {
			clock = []string{fmt.Sprintf("tsc_early_khz=%d", spec.tscKHz), "tsc=reliable"}
		}
	}
	cmdline := []string{"console=ttyS0", "quiet", "loglevel=3", "panic=-1", "rdinit=" + guest.Path,
		guest.TransportParam + "=" + spec.transport, "random.trust_cpu=on"}
	cmdline = append(cmdline, clock...)
	args := []string{
		"-name", spec.name + ",process=" + spec.name,
		"-M", machine,
	}
	args = append(args, accel...)
	args = append(args,
		"-m", strconv.Itoa(spec.memMiB), "-smp", strconv.Itoa(spec.cpus),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-kernel", spec.assets.kernel.Image(), "-initrd", spec.assets.initramfs,
		"-append", strings.Join(cmdline, " "),
		"-chardev", "socket,id=con,fd=4", "-serial", "chardev:con",
	)
	// free page reporting: the guest tells QEMU of the free memory it
	// holds in blocks of 2 MiB, and QEMU gives those back to the host;
	// the balloon is never inflated.
	args = append(args, "-device", "virtio-balloon-device,free-page-reporting=on")
	if spec.assets.rootfs != "" {
		args = append(args, "-drive", "id=root,file="+spec.assets.rootfs+",format=raw,if=none,readonly=on,snapshot=off",
			"-device", "virtio-blk-device,drive=root")
	}
	if spec.transport == TransportVsock {
		return append(args, "-device", fmt.Sprintf("vhost-vsock-device,guest-cid=%d", cid))
	}
	return append(args, "-chardev", "socket,id=ch,fd=3",
		"-device", "virtio-serial-device,max_ports=2", "-device", "virtserialport,chardev=ch,name="+guest.PortName)
}

// startMachine starts QEMU in cg (which may be nil) and connects to its
// channel. QEMU is started from an OS thread that stays locked until QEMU
// is reaped, with SIGKILL as its parent-death signal: the kernel sends it
// when that thread exits, so QEMU dies with airlock however airlock dies.
func startMachine(ctx context.Context, spec machineSpec, cg *native.HostCgroup) (*machine, error) {
	ours, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	defer theirs.Close()
	conOurs, conTheirs, err := socketPair()
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer conTheirs.Close()
	var cid uint32
	if spec.transport == TransportVsock {
		cid = guestCID()
	}
	m := &machine{cg: cg, console: &tail{max: 16 << 10}, dead: make(chan struct{})}
	m.cmd = exec.Command(spec.qemu, qemuArgs(spec, cid)...)
	m.cmd.Env = []string{}
	m.cmd.ExtraFiles = []*os.File{theirs, conTheirs}
	m.cmd.Stdout, m.cmd.Stderr = m.console, m.console
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if cg != nil {
		if fd := cg.Dir(); fd >= 0 {
			m.cmd.SysProcAttr.UseCgroupFD, m.cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: QEMU's parent-death signal follows this thread
		err := m.cmd.Start()
		started <- err
		if err == nil {
			_ = m.cmd.Wait()
		}
		close(m.dead)
	}()
	if err := <-started; err != nil {
		ours.Close()
		conOurs.Close()
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	go func() { _, _ = io.Copy(m.console, conOurs); conOurs.Close() }()
	if cg != nil {
		if err := cg.Place(m.cmd.Process.Pid); err != nil {
			m.kill()
			ours.Close()
			return nil, err
		}
	}
	if spec.transport != TransportVsock {
		c, err := net.FileConn(ours)
		ours.Close()
		if err != nil {
			m.kill()
			return nil, err
		}
		m.conn = c
		return m, nil
	}
	ours.Close()
	if m.conn, err = dialVsock(ctx, cid, m.dead); err != nil {
		m.kill()
		return nil, err
	}
	return m, nil
}

// socketPair returns the two ends of a stream socket pair.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "qemu"), nil
}

// guestCID picks a context id for a vsock guest: random, above the
// reserved ones; QEMU fails to start if another guest holds it.
func guestCID() uint32 {
	var b [4]byte
	_, _ = io.ReadFull(randReader, b[:])
	return 3 + (uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3]&0x7f)<<24)%(1<<30)
}

// dialVsock connects to the agent's vsock port, retrying while the guest
// boots, until ctx ends or QEMU dies.
func dialVsock(ctx context.Context, cid uint32, dead <-chan struct{}) (io.ReadWriteCloser, error) {
	for {
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("vsock: %w", err)
		}
		err = unix.Connect(fd, &unix.SockaddrVM{CID: cid, Port: guest.VsockPort})
		if err == nil {
			return os.NewFile(uintptr(fd), "vsock"), nil
		}
		unix.Close(fd)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("vsock connect to cid %d: %w (last: %v)", cid, ctx.Err(), err)
		case <-dead:
			return nil, errors.New("qemu exited before its guest listened on vsock")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill ends QEMU and waits until it is reaped, at most waitTimeout.
func (m *machine) kill() error {
	if m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
	}
	select {
	case <-m.dead:
		return nil
	case <-time.After(waitTimeout):
		return fmt.Errorf("qemu %d not reaped after %v", m.cmd.Process.Pid, waitTimeout)
	}
}

// waitTimeout bounds how long Destroy waits for QEMU to be reaped.
const waitTimeout = 10 * time.Second

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
