package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The sandbox's root is a fresh tmpfs. Into it go read-only binds of the
// image's folders, a synthesized /etc, a minimal /dev, a fresh /proc with
// its sensitive files masked, and the writable folders. The supervisor
// decides what goes in (rootPlan); init, inside the new namespaces,
// carries it out (buildRoot).

// Entry kinds of a root plan.
const (
	entryDir     = "dir"     // Dst is created as a folder with Mode
	entryFile    = "file"    // Dst is written with Content and Mode
	entrySymlink = "symlink" // Dst is a symlink to Target
	entryBind    = "bind"    // host path Src is bound read-only at Dst
)

// rootEntry is one step of building the root; Dst is relative to it.
type rootEntry struct {
	Kind    string      `json:"kind"`
	Dst     string      `json:"dst"`
	Src     string      `json:"src,omitempty"`
	Target  string      `json:"target,omitempty"`
	Content string      `json:"content,omitempty"`
	Mode    fs.FileMode `json:"mode,omitempty"`
}

// initConfig is everything init needs to build the sandbox.
type initConfig struct {
	Hostname   string         `json:"hostname"`
	Root       []rootEntry    `json:"root"`
	DiskBytes  int64          `json:"disk_bytes"`
	DiskInodes int64          `json:"disk_inodes"`
	UID        int            `json:"uid"`
	GID        int            `json:"gid"`
	Limits     *sandboxLimits `json:"limits"`
	// EgressPort, when set, is where init listens on the sandbox's lo for
	// the egress proxy; the listening socket goes to the supervisor.
	EgressPort int `json:"egress_port,omitempty"`
}

// Inside paths.
const (
	sandboxHostname = "airlock"
	workspaceDir    = "/workspace"
	inputDir        = "/workspace/input"
	outputDir       = "/workspace/output"
)

// hostSystemDirs are the host folders the "host" image binds read-only.
var hostSystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostEtcAllow lists what the "host" image takes from the host's /etc: the
// dynamic loader's cache, certificates, fonts, time zone, MIME and
// protocol tables. Never the rest of /etc (no shadow, ssh, credentials).
var hostEtcAllow = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts",
	"ssl/certs", "ssl/openssl.cnf", "ca-certificates", "localtime", "timezone",
	"mime.types", "os-release", "debian_version", "lsb-release", "matplotlibrc",
	"magic", "magic.mime", "protocols", "services", "gai.conf", "host.conf",
	"ImageMagick-6", "python3", "python3.11", "python3.12", "python3.13",
}

// imageReserved are top-level names of an image folder that the sandbox
// provides itself.
var imageReserved = map[string]bool{
	"proc": true, "dev": true, "sys": true, "tmp": true, "workspace": true, "run": true,
}

// hostPlan builds the root for the "host" image.
func hostPlan(uid, gid int) ([]rootEntry, error) {
	var plan []rootEntry
	for _, d := range hostSystemDirs {
		e, ok, err := planEntry("/"+d, d)
		if err != nil {
			return nil, err
		}
		if ok {
			plan = append(plan, e)
		}
	}
	plan = append(plan, rootEntry{Kind: entryDir, Dst: "etc", Mode: 0o755})
	plan = append(plan, synthesizedEtc(uid, gid)...)
	for _, name := range hostEtcAllow {
		e, ok, err := planEntry("/etc/"+name, "etc/"+name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if dir := filepath.Dir(e.Dst); dir != "etc" {
			plan = append(plan, rootEntry{Kind: entryDir, Dst: dir, Mode: 0o755})
		}
		plan = append(plan, e)
	}
	return plan, nil
}

// dirPlan builds the root for an image folder: every top-level entry but
// the reserved ones, bound read-only.
func dirPlan(dir string) ([]rootEntry, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("image %s is not a folder", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", dir, err)
	}
	var plan []rootEntry
	for _, de := range ents {
		if imageReserved[de.Name()] {
			continue
		}
		e, ok, err := planEntry(filepath.Join(dir, de.Name()), de.Name())
		if err != nil {
			return nil, err
		}
		if ok {
			plan = append(plan, e)
		}
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("image folder %s is empty", dir)
	}
	return plan, nil
}

// planEntry turns one host path into a plan entry: a symlink is recreated,
// a folder or regular file is bound. Missing paths and other kinds are
// left out.
func planEntry(src, dst string) (rootEntry, bool, error) {
	st, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return rootEntry{}, false, nil
	}
	if err != nil {
		return rootEntry{}, false, err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return rootEntry{}, false, err
		}
		return rootEntry{Kind: entrySymlink, Dst: dst, Target: t}, true, nil
	case st.IsDir() || st.Mode().IsRegular():
		return rootEntry{Kind: entryBind, Dst: dst, Src: src}, true, nil
	}
	return rootEntry{}, false, nil
}

// synthesizedEtc is the minimal /etc the host image gets instead of the
// host's: the sandbox user, localhost, and name-service order.
func synthesizedEtc(uid, gid int) []rootEntry {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	return []rootEntry{
		{Kind: entryFile, Dst: "etc/passwd", Mode: 0o644, Content: "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"sandbox:x:" + u + ":" + g + ":sandbox:/tmp:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{Kind: entryFile, Dst: "etc/group", Mode: 0o644, Content: "root:x:0:\nsandbox:x:" + g + ":\nnogroup:x:65534:\n"},
		{Kind: entryFile, Dst: "etc/hosts", Mode: 0o644, Content: "127.0.0.1\tlocalhost " + sandboxHostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{Kind: entryFile, Dst: "etc/hostname", Mode: 0o644, Content: sandboxHostname + "\n"},
		{Kind: entryFile, Dst: "etc/nsswitch.conf", Mode: 0o644, Content: "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
}

// Files and folders of /proc that reveal or change host state: masked
// with an empty file or folder, or made read-only.
var (
	procMaskFiles = []string{"kcore", "keys", "key-users", "latency_stats", "timer_list",
		"timer_stats", "sched_debug", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup",
		"config.gz", "vmallocinfo", "sysrq-trigger"}
	procMaskDirs  = []string{"acpi", "scsi", "asound", "firmware", "driver", "tty"}
	procReadOnly  = []string{"sys", "irq", "bus", "fs"}
	deviceNodes   = []string{"null", "zero", "full", "random", "urandom"}
	deviceSymlink = [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
		{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}}
)

// newRootBase is where the new root is assembled in init's private mount
// namespace before pivot_root. Mounting over it there changes nothing on
// the host.
const newRootBase = "/tmp"

// builtRoot is what buildRoot hands back to init.
type builtRoot struct {
	output *os.File // /workspace/output, for the artifact filter
	input  *os.File // a writable detached mount of the input tmpfs
	egress *os.File // the egress proxy's listening socket, or nil
}

// buildRoot assembles the root described by cfg and pivots into it.
func buildRoot(cfg *initConfig) (builtRoot, error) {
	var br builtRoot
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return br, fmt.Errorf("make mounts private: %w", err)
	}
	rootFD, err := newFS("tmpfs", [][2]string{{"size", "8m"}, {"nr_inodes", "4096"}, {"mode", "0755"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return br, err
	}
	if err := attachMount(rootFD, newRootBase); err != nil {
		return br, err
	}
	r := func(p string) string { return filepath.Join(newRootBase, p) }
	for _, e := range cfg.Root {
		if err := applyEntry(e, r(e.Dst)); err != nil {
			return br, fmt.Errorf("root entry %s %s: %w", e.Kind, e.Dst, err)
		}
	}
	if err := buildDev(r("dev")); err != nil {
		return br, err
	}
	if err := buildScratch(cfg, r); err != nil {
		return br, err
	}
	in, err := buildInput(r(strings.TrimPrefix(inputDir, "/")))
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
	br.output, err = os.OpenFile(outputDir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return br, err
	}
	return br, nil
}

func applyEntry(e rootEntry, dst string) error {
	switch e.Kind {
	case entryDir:
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		return os.Chmod(dst, e.Mode)
	case entryFile:
		return os.WriteFile(dst, []byte(e.Content), e.Mode)
	case entrySymlink:
		return os.Symlink(e.Target, dst)
	case entryBind:
		if err := mountPointFor(e.Src, dst); err != nil {
			return err
		}
		return bindReadOnly(e.Src, dst)
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
	for _, n := range deviceNodes {
		dst := filepath.Join(dev, n)
		if err := mountPointFor("/dev/"+n, dst); err != nil {
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
		if err := os.Symlink(l[1], filepath.Join(dev, l[0])); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(dev, "shm"), 0o755); err != nil {
		return err
	}
	// POSIX message queues of the sandbox's own IPC namespace; Landlock
	// lets commands write only here and in the writable folders.
	mq := filepath.Join(dev, "mqueue")
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
func buildScratch(cfg *initConfig, r func(string) string) error {
	fd, err := newFS("tmpfs", [][2]string{
		{"size", strconv.FormatInt(cfg.DiskBytes, 10)},
		{"nr_inodes", strconv.FormatInt(cfg.DiskInodes, 10)},
		{"mode", "0755"},
	}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := os.MkdirAll(r(strings.TrimPrefix(outputDir, "/")), 0o755); err != nil {
		return err
	}
	parts := []struct {
		name, at string
		mode     uint32
	}{
		{"tmp", "tmp", 0o1777},
		{"output", strings.TrimPrefix(outputDir, "/"), 0o755},
		{"shm", "dev/shm", 0o1777},
	}
	for _, p := range parts {
		if err := unix.Mkdirat(fd, p.name, 0o700); err != nil {
			return fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := unix.Fchownat(fd, p.name, cfg.UID, cfg.GID, 0); err != nil {
			return fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := unix.Fchmodat(fd, p.name, p.mode, 0); err != nil {
			return fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := os.MkdirAll(r(p.at), 0o755); err != nil {
			return err
		}
		part, err := cloneMount(fd, p.name, false)
		if err != nil {
			return err
		}
		if err := attachMount(part, r(p.at)); err != nil {
			return err
		}
	}
	return nil
}

// buildInput mounts the input tmpfs read-only at dst and returns a second,
// writable, detached mount of it through which init stores input files.
func buildInput(dst string) (int, error) {
	rw, err := newFS("tmpfs", [][2]string{{"mode", "0755"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, err
	}
	ro, err := cloneMount(rw, "", false)
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
		p := filepath.Join(dst, name)
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
		p := filepath.Join(dst, name)
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
		p := filepath.Join(dst, name)
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
