package nsinit

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// restrictions is what the workload runs under, applied to one OS thread
// just before that thread forks the workload.
type restrictions struct {
	uid, gid  int
	setGroups bool // false where setgroups is denied (rootless)
	ruleset   int  // a Landlock ruleset to enforce, or -1
	seccomp   []unix.SockFilter
}

// restrictThread applies r to the calling OS thread only: no_new_privs, an
// empty capability bounding set, ambient, inheritable, permitted and
// effective sets, the sandbox user, Landlock, and seccomp last. The caller
// holds runtime.LockOSThread and must never unlock, so the Go runtime
// retires the thread when its goroutine ends.
func restrictThread(r restrictions) error {
	if err := prctl(unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	for c := 0; c < 64; c++ {
		err := prctl(unix.PR_CAPBSET_DROP, uintptr(c))
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if r.setGroups {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(r.gid), uintptr(r.gid), uintptr(r.gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", r.gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(r.uid), uintptr(r.uid), uintptr(r.uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", r.uid, e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	if r.ruleset >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.ruleset), 0, 0); e != 0 {
			return fmt.Errorf("landlock: restrict self: %w", e)
		}
	}
	return installSeccomp(r.seccomp)
}

func prctl(option int, arg uintptr) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PRCTL, uintptr(option), arg, 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// Landlock access rights, by the ABI version that introduced them.
const (
	llReadOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR
	llABI1 = llReadOnly | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	// llWritable is what a writable folder allows: everything but exec and
	// device nodes.
	llWritable = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_SYM |
		unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// landlockHandled returns the filesystem rights an ABI version knows; the
// ruleset handles all of them so that none is left unrestricted.
func landlockHandled(abi int) uint64 {
	h := uint64(llABI1)
	if abi >= 2 {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return h
}

// LandlockABI asks the kernel which Landlock ABI it offers; 0 means none.
func LandlockABI() int {
	v, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// rulesetAttr mirrors struct landlock_ruleset_attr up to the scoped field.
type rulesetAttr struct {
	handledFS, handledNet, scoped uint64
}

// buildRuleset makes the sandbox's Landlock ruleset once: everything may
// be read and executed, only the writable folders written. Every command
// then enforces the same ruleset on its thread. The descriptor is
// close-on-exec.
func buildRuleset(c *LandlockConfig) (int, error) {
	handled := landlockHandled(c.ABI)
	attr := rulesetAttr{handledFS: handled}
	if c.ABI >= 6 {
		attr.scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	fd, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return -1, fmt.Errorf("landlock: create ruleset: %w", e)
	}
	groups := []struct {
		paths  []string
		access uint64
	}{{c.ReadOnly, llReadOnly}, {c.Writable, llWritable}, {c.Devices, llDevice}}
	for _, g := range groups {
		for _, p := range g.paths {
			if err := addLandlockRule(int(fd), p, g.access&handled); err != nil {
				unix.Close(int(fd))
				return -1, err
			}
		}
	}
	return int(fd), nil
}

func addLandlockRule(ruleset int, path string, access uint64) error {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // nothing there to allow
		}
		return fmt.Errorf("landlock: open %s: %w", path, err)
	}
	defer unix.Close(pfd)
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
	_, _, e := unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if e != 0 {
		return fmt.Errorf("landlock: allow %s: %w", path, e)
	}
	return nil
}
