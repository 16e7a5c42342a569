package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == Path && os.Getpid() == 1 {
		os.Exit(agentMain())
	}
}

// agentMain is the guest's pid 1: it boots the machine far enough to
// reach the host, serves it until the connection ends, and powers off.
func agentMain() int {
	err := boot()
	if err == nil {
		var conn io.ReadWriteCloser
		if conn, err = connect(); err == nil {
			err = serve(conn, setup)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock guest:", err)
	}
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // pid 1 must not exit: the kernel would panic
}

// boot mounts what the agent needs, leaves the initramfs's rootfs (which
// pivot_root refuses, and the native sandbox inside pivots) for a bind of
// it, and loads the kernel modules: enough to reach the host.
func boot() error {
	return run([]step{
		{"leave rootfs", leaveRootfs},
		{"mount", mountBasics},
		{"modules", loadModules},
	})
}

// setup readies the rest once the host heard from the agent: the image's
// disk and the cgroups. A machine that only probes the accelerator has no
// disk and ends before.
func setup() error {
	return run([]step{
		{"image", mountImage},
		{"cgroups", mountCgroups},
	})
}

type step struct {
	what string
	do   func() error
}

func run(steps []step) error {
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// leaveRootfs makes a bind of the initramfs the root: pivot_root refuses
// a root that is the rootfs itself, and the sandbox inside pivots.
func leaveRootfs() error {
	const dir = "/newroot"
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.Mount("/", dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind /: %w", err)
	}
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return unix.Chdir("/")
}

func mountBasics() error {
	for _, m := range []struct{ dir, fs, opts string }{
		{"/proc", "proc", ""},
		{"/sys", "sysfs", ""},
		{"/dev", "devtmpfs", "mode=0755"},
		{"/run", "tmpfs", "mode=0755"},
		{"/tmp", "tmpfs", "mode=1777"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fs, m.dir, m.fs, unix.MS_NOSUID|unix.MS_NOEXEC, m.opts); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fs, m.dir, err)
		}
	}
	return nil
}

// loadModules loads the modules of the initramfs in the order its list
// gives (dependencies first), each with the parameters the kernel
// command line gives it ("virtio_mmio.device=…"), as modprobe would.
func loadModules() error {
	order, err := os.ReadFile(ModulesOrder)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, name := range strings.Fields(string(order)) {
		if err := loadModule(filepath.Join(ModulesDir, name), moduleParams(string(cmdline), strings.TrimSuffix(name, ".ko"))); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load %s: %w", filepath.Base(path), err)
	}
	return nil
}

// moduleParams picks module's parameters out of a kernel command line.
func moduleParams(cmdline, module string) string {
	norm := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	var out []string
	for _, f := range strings.Fields(cmdline) {
		mod, param, ok := strings.Cut(f, ".")
		if ok && norm(mod) == norm(module) && param != "" {
			out = append(out, param)
		}
	}
	return strings.Join(out, " ")
}

// cmdlineParam returns the value of name=value on the kernel command line.
func cmdlineParam(name string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// waitFor polls until found returns a path, for devices that appear
// once their driver has probed them.
func waitFor(what string, found func() string) (string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p := found(); p != "" {
			return p, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s did not appear", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// mountImage mounts the image's read-only disk, the machine's first
// virtio block device.
func mountImage() error {
	dev, err := waitFor("the image disk /dev/vda", func() string {
		if _, err := os.Stat("/dev/vda"); err == nil {
			return "/dev/vda"
		}
		return ""
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ImageDir, 0o755); err != nil {
		return err
	}
	var last error
	for _, fs := range []string{"erofs", "ext4"} {
		if last = unix.Mount(dev, ImageDir, fs, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); last == nil {
			return nil
		}
	}
	return fmt.Errorf("mount the image disk: %w", last)
}

// mountCgroups mounts cgroup v2 and hands memory, cpu and pids to the
// children of its root, where the native sandbox makes its folders.
func mountCgroups() error {
	const dir = "/sys/fs/cgroup"
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount cgroup2: %w", err)
	}
	return os.WriteFile(dir+"/cgroup.subtree_control", []byte("+memory +cpu +pids"), 0)
}

// serialPort finds the virtio-serial port named PortName.
func serialPort() string {
	ents, _ := os.ReadDir("/sys/class/virtio-ports")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
		if err == nil && strings.TrimSpace(string(b)) == PortName {
			if _, err := os.Stat("/dev/" + e.Name()); err == nil {
				return "/dev/" + e.Name()
			}
		}
	}
	return ""
}

// connect opens the connection to the host: the virtio-serial port, or,
// when the command line asks for vsock, the first connection to
// VsockPort.
func connect() (io.ReadWriteCloser, error) {
	if cmdlineParam(TransportParam) == "vsock" {
		return acceptVsock()
	}
	p, err := waitFor("the virtio-serial port "+PortName, serialPort)
	if err != nil {
		return nil, err
	}
	return os.OpenFile(p, os.O_RDWR, 0)
}

// acceptVsock listens on VsockPort and takes the host's one connection.
func acceptVsock() (io.ReadWriteCloser, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: VsockPort}); err != nil {
		return nil, fmt.Errorf("vsock bind: %w", err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		return nil, fmt.Errorf("vsock listen: %w", err)
	}
	nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vsock accept: %w", err)
	}
	return os.NewFile(uintptr(nfd), "vsock"), nil
}
