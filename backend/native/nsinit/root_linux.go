package nsinit

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Files and folders of /proc that reveal or change host state: masked
// with an empty file or folder, or made read-only.
var (
	procMaskFiles = []string{"kcore", "keys", "key-users", "latency_stats", "timer_list",
		"timer_stats", "sched_debug", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup",
		"config.gz", "vmallocinfo", "sysrq-trigger"}
	procMaskDirs  = []string{"acpi", "scsi", "asound", "firmware", "driver", "tty"}
	procReadOnly  = []string{"sys", "irq", "bus", "fs"}
	DeviceNodes   = []string{"null", "zero", "full", "random", "urandom"}
	deviceSymlink = [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}}
)

// newRootBase is where the new root is assembled in init's private mount
// namespace before pivot_root. Mounting over it there changes nothing on
// the host.
const newRootBase = "/tmp"

// stageDir, in the new root while it is built, is where a detached mount
// is attached for a moment on kernels that clone only attached mounts
// (see detachedTree); it is gone before the pivot.
const stageDir = ".airlock-stage"

// builtRoot is what buildRoot hands back to init.
type builtRoot struct {
	output   *os.File // /workspace/output as mounted, for the supervisor's artifact filter
	outputRW *os.File // the same folder on the scratch tmpfs, for init's file operations
	tmp      *os.File // /tmp on the scratch tmpfs
	input    *os.File // a writable detached mount of the input tmpfs
}

// buildRoot assembles the root described by cfg and pivots into it.
// binds are the plan's bind entries in order: detached, read-only mounts
// the supervisor cloned (see EntryBind); with none (rootless, where the
// supervisor may not clone mounts), init clones them itself, first.
func buildRoot(cfg *Config, binds []*os.File) (builtRoot, error) {
	var br builtRoot
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return br, fmt.Errorf("make mounts private: %w", err)
	}
	if len(binds) == 0 {
		own, err := cloneBinds(cfg.Root)
		defer CloseAll(own)
		if err != nil {
			return br, err
		}
		binds = own
	}
	rootFD, err := newFS("tmpfs", [][2]string{{"size", "8m"}, {"nr_inodes", "4096"}, {"mode", "0755"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return br, err
	}
	if err := attachMount(rootFD, newRootBase); err != nil {
		return br, err
	}
	r := func(p string) string { return join(newRootBase, p) }
	for _, e := range cfg.Root {
		var src *os.File
		if e.Kind == EntryBind {
			if len(binds) == 0 {
				return br, fmt.Errorf("root entry bind %s: no mount passed for it", e.Dst)
			}
			src, binds = binds[0], binds[1:]
		}
		if err := applyEntry(e, r(e.Dst), src); err != nil {
			return br, fmt.Errorf("root entry %s %s: %w", e.Kind, e.Dst, err)
		}
	}
	if err := buildDev(r("dev")); err != nil {
		return br, err
	}
	if br.tmp, br.outputRW, err = buildScratch(cfg, r); err != nil {
		return br, err
	}
	in, err := buildInput(r(strings.TrimPrefix(InputDir, "/")), r(stageDir), cfg.InputBytes)
	if err != nil {
		return br, err
	}
	br.input = os.NewFile(uintptr(in), "input")
	if err := buildProc(r("proc"), r("dev/null")); err != nil {
		return br, err
	}
	if err := pivot(newRootBase); err != nil {
		return br, err
	}
	rfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return br, err
	}
	err = setMountAttr(rfd, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
	unix.Close(rfd)
	if err != nil {
		return br, fmt.Errorf("make root read-only: %w", err)
	}
	br.output, err = os.OpenFile(OutputDir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return br, err
	}
	return br, nil
}

// cloneBinds clones every bind source of the plan, read-only, nosuid and
// nodev, while the host's paths are still visible.
func cloneBinds(plan []RootEntry) ([]*os.File, error) {
	var out []*os.File
	for _, e := range plan {
		if e.Kind != EntryBind {
			continue
		}
		fd, err := cloneMount(unix.AT_FDCWD, e.Src, true)
		if err != nil {
			return out, err
		}
		out = append(out, os.NewFile(uintptr(fd), e.Src))
		if err := setMountAttr(fd, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, true); err != nil {
			return out, fmt.Errorf("%s: %w", e.Src, err)
		}
	}
	return out, nil
}

func applyEntry(e RootEntry, dst string, src *os.File) error {
	switch e.Kind {
	case EntryDir:
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		return os.Chmod(dst, e.Mode)
	case EntryFile:
		return os.WriteFile(dst, []byte(e.Content), e.Mode)
	case EntrySymlink:
		return os.Symlink(e.Target, dst)
	case EntryBind:
		if err := mountPoint(dst, e.Dir); err != nil {
			return err
		}
		fd, err := unix.Dup(int(src.Fd()))
		if err != nil {
			return err
		}
		return attachMount(fd, dst)
	}
	return fmt.Errorf("unknown entry kind %q", e.Kind)
}

// buildDev makes a small read-only tmpfs /dev holding the harmless device
// nodes (bound from the host), the fd symlinks and /dev/shm.
func buildDev(dev string) error {
	fd, err := newFS("tmpfs", [][2]string{{"size", "64k"}, {"nr_inodes", "64"}, {"mode", "0755"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dev, 0o755); err != nil {
		unix.Close(fd)
		return err
	}
	if err := attachMount(fd, dev); err != nil {
		return err
	}
	for _, n := range DeviceNodes {
		dst := join(dev, n)
		if err := mountPoint(dst, false); err != nil {
			return err
		}
		nfd, err := cloneMount(unix.AT_FDCWD, "/dev/"+n, false)
		if err != nil {
			return err
		}
		if err := setMountAttr(nfd, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			unix.Close(nfd)
			return err
		}
		if err := attachMount(nfd, dst); err != nil {
			return err
		}
	}
	for _, l := range deviceSymlink {
		if err := os.Symlink(l[1], join(dev, l[0])); err != nil {
			return err
		}
	}
	if err := os.Mkdir(join(dev, "shm"), 0o755); err != nil {
		return err
	}
	// POSIX message queues of the sandbox's own IPC namespace; Landlock
	// lets commands write only here and in the writable folders.
	mq := join(dev, "mqueue")
	if err := os.Mkdir(mq, 0o755); err != nil {
		return err
	}
	mfd, err := newFS("mqueue", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return err
	}
	return attachMount(mfd, mq)
}

// buildScratch makes the one tmpfs that holds all writable space, capped
// by the disk limit, and binds its parts at /tmp, /workspace/output and
// /dev/shm.
//
// It returns folders of the scratch tmpfs for init's file operations:
// /tmp and /workspace/output.
func buildScratch(cfg *Config, r func(string) string) (tmp, output *os.File, err error) {
	fd, err := newFS("tmpfs", [][2]string{
		{"size", strconv.FormatInt(cfg.DiskBytes, 10)},
		{"nr_inodes", strconv.FormatInt(cfg.DiskInodes, 10)},
		{"mode", "0755"},
	}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(fd)
	if err := os.MkdirAll(r(strings.TrimPrefix(OutputDir, "/")), 0o755); err != nil {
		return nil, nil, err
	}
	tree := &detachedTree{fd: fd, stage: r(stageDir)}
	defer tree.done()
	parts := []struct {
		name, at string
		mode     uint32
	}{
		{"tmp", "tmp", 0o1777},
		{"output", strings.TrimPrefix(OutputDir, "/"), 0o755},
		{"shm", "dev/shm", 0o1777},
	}
	for _, p := range parts {
		if err := unix.Mkdirat(fd, p.name, 0o700); err != nil {
			return nil, nil, fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := unix.Fchownat(fd, p.name, cfg.UID, cfg.GID, 0); err != nil {
			return nil, nil, fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := unix.Fchmodat(fd, p.name, p.mode, 0); err != nil {
			return nil, nil, fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := os.MkdirAll(r(p.at), 0o755); err != nil {
			return nil, nil, err
		}
		part, err := tree.clone(p.name)
		if err != nil {
			return nil, nil, err
		}
		if err := attachMount(part, r(p.at)); err != nil {
			return nil, nil, err
		}
	}
	open := func(name string) (*os.File, error) {
		d, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return nil, fmt.Errorf("scratch %s: %w", name, err)
		}
		return os.NewFile(uintptr(d), name), nil
	}
	if tmp, err = open("tmp"); err != nil {
		return nil, nil, err
	}
	if output, err = open("output"); err != nil {
		tmp.Close()
		return nil, nil, err
	}
	return tmp, output, nil
}

// buildInput mounts the input tmpfs, capped at size bytes, read-only at
// dst and returns a second, writable, detached mount of it through which
// init stores input files. stage is as for detachedTree.
func buildInput(dst, stage string, size int64) (int, error) {
	rw, err := newFS("tmpfs", [][2]string{{"size", strconv.FormatInt(max(size, 4096), 10)}, {"mode", "0755"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, err
	}
	tree := &detachedTree{fd: rw, stage: stage}
	ro, err := tree.clone("")
	if derr := tree.done(); err == nil {
		err = derr
	}
	if err == nil {
		err = setMountAttr(ro, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, false)
		if err != nil {
			unix.Close(ro)
		}
	}
	if err == nil {
		if err = os.MkdirAll(dst, 0o755); err == nil {
			err = attachMount(ro, dst)
		}
	}
	if err != nil {
		unix.Close(rw)
		return -1, fmt.Errorf("input folder: %w", err)
	}
	return rw, nil
}

// buildProc mounts a fresh proc for the sandbox's pid namespace and masks
// what would reveal or change the host.
func buildProc(dst, null string) error {
	if err := os.Mkdir(dst, 0o555); err != nil {
		return err
	}
	fd, err := newFS("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return err
	}
	if err := attachMount(fd, dst); err != nil {
		return err
	}
	for _, name := range procMaskFiles {
		p := join(dst, name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		nfd, err := cloneMount(unix.AT_FDCWD, null, false)
		if err != nil {
			return err
		}
		if err := setMountAttr(nfd, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			unix.Close(nfd)
			return err
		}
		if err := attachMount(nfd, p); err != nil {
			return err
		}
	}
	for _, name := range procMaskDirs {
		p := join(dst, name)
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			continue
		}
		tfd, err := newFS("tmpfs", [][2]string{{"size", "4k"}, {"nr_inodes", "1"}, {"mode", "0555"}},
			unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return err
		}
		if err := attachMount(tfd, p); err != nil {
			return err
		}
	}
	for _, name := range procReadOnly {
		p := join(dst, name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		rfd, err := cloneMount(unix.AT_FDCWD, p, true)
		if err != nil {
			return err
		}
		if err := setMountAttr(rfd, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, true); err != nil {
			unix.Close(rfd)
			return err
		}
		if err := attachMount(rfd, p); err != nil {
			return err
		}
	}
	return nil
}

// pivot makes newRoot the root and drops every host mount from this
// namespace.
func pivot(newRoot string) error {
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}
