package seccompprofile

import (
	"fmt"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// These tests pin the container profile, as the OCI runtime gets it for a
// process without capabilities, to the requirements (SECURITY-SUITE.md,
// "Privileges"; the README's seccomp paragraph), written out by hand: a
// small evaluator answers what the profile does with one call and its
// arguments, the way libseccomp matches rules.

// verdict is what the profile does with one call: an action, and the
// errno for errno actions.
type verdict struct {
	action specs.LinuxSeccompAction
	errno  uint
}

func (v verdict) String() string {
	if v.action == specs.ActErrno {
		return fmt.Sprintf("%s(%d)", v.action, v.errno)
	}
	return string(v.action)
}

var (
	allow = verdict{action: specs.ActAllow}
	eperm = verdict{action: specs.ActErrno, errno: uint(unix.EPERM)}
	// trace without a tracer, which the sandbox cannot become: the
	// kernel (and gVisor) fail the call with ENOSYS
	enosysByTrace = verdict{action: specs.ActTrace}
)

func argMatches(a specs.LinuxSeccompArg, args []uint64) bool {
	var v uint64
	if int(a.Index) < len(args) {
		v = args[a.Index]
	}
	switch a.Op {
	case specs.OpEqualTo:
		return v == a.Value
	case specs.OpNotEqual:
		return v != a.Value
	case specs.OpLessThan:
		return v < a.Value
	case specs.OpLessEqual:
		return v <= a.Value
	case specs.OpGreaterThan:
		return v > a.Value
	case specs.OpGreaterEqual:
		return v >= a.Value
	case specs.OpMaskedEqual:
		return v&a.Value == a.ValueTwo
	}
	panic("unknown seccomp operator " + string(a.Op))
}

// decide answers what profile s does with call name and args. A rule
// matches when all its argument conditions hold; two matching rules with
// different actions make the answer depend on libseccomp's precedence,
// which this profile must not rely on, and fail the test.
func decide(t *testing.T, s *specs.LinuxSeccomp, name string, args ...uint64) verdict {
	t.Helper()
	var found []verdict
	for _, r := range s.Syscalls {
		named := false
		for _, n := range r.Names {
			named = named || n == name
		}
		if !named {
			continue
		}
		ok := true
		for _, a := range r.Args {
			ok = ok && argMatches(a, args)
		}
		if !ok {
			continue
		}
		v := verdict{action: r.Action}
		if r.Action == specs.ActErrno {
			v.errno = uint(unix.EPERM)
			if r.ErrnoRet != nil {
				v.errno = *r.ErrnoRet
			}
		}
		found = append(found, v)
	}
	for _, v := range found[min(1, len(found)):] {
		if v != found[0] {
			t.Fatalf("%s %#x: rules disagree: %v", name, args, found)
		}
	}
	if len(found) > 0 {
		return found[0]
	}
	v := verdict{action: s.DefaultAction}
	if v.action == specs.ActErrno {
		v.errno = uint(unix.EPERM)
		if s.DefaultErrnoRet != nil {
			v.errno = *s.DefaultErrnoRet
		}
	}
	return v
}

func noCapsProfile(t *testing.T) *specs.LinuxSeccomp {
	t.Helper()
	s, err := OCI(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refusedByName lists the calls the sandbox must never make, whatever
// their arguments; the answer is EPERM but for clone3 (see Profile).
var refusedByName = []string{
	// namespaces, the mount family, the mount tables
	"unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "open_tree_attr", "mount_setattr", "statmount", "listmount", "listns",
	"swapon", "swapoff", "quotactl", "quotactl_fd",
	// file handles, filesystem-wide watches
	"name_to_handle_at", "open_by_handle_at", "fanotify_init", "fanotify_mark",
	// keys and the kernel's attack surface and state
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "create_module", "get_kernel_syms", "query_module",
	"syslog", "reboot", "iopl", "ioperm", "modify_ldt", "acct", "settimeofday", "clock_settime",
	"clock_adjtime", "adjtimex", "sethostname", "setdomainname", "vhangup", "lookup_dcookie", "nfsservctl",
	"uselib", "_sysctl", "memfd_secret", "lsm_set_self_attr",
	// other processes
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
	"process_mrelease", "migrate_pages", "move_pages",
}

func TestProfilePinRefusals(t *testing.T) {
	s := noCapsProfile(t)
	for _, n := range refusedByName {
		for _, args := range [][]uint64{nil, {0, 0, 0}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}} {
			if got := decide(t, s, n, args...); got != eperm {
				t.Errorf("%s %#x: the profile says %v, the requirements say %v", n, args, got, eperm)
			}
		}
	}
	if got := decide(t, s, "clone3"); got != enosysByTrace {
		t.Errorf("clone3: %v, want %v", got, enosysByTrace)
	}
}

func TestProfilePinArguments(t *testing.T) {
	s := noCapsProfile(t)
	type c struct {
		name string
		call string
		args []uint64
		want verdict
	}
	var cases []c
	add := func(name, call string, want verdict, args ...uint64) {
		cases = append(cases, c{name, call, args, want})
	}

	const mfdExec, mfdCloexec, mfdAllowSealing, mfdNoexecSeal, mfdHugetlb = 0x10, 0x1, 0x2, 0x8, 0x4
	for _, f := range []uint64{0, mfdCloexec, mfdAllowSealing, mfdCloexec | mfdAllowSealing, mfdNoexecSeal, mfdHugetlb | 21<<26} {
		add(fmt.Sprintf("memfd_create %#x", f), "memfd_create", allow, 0, f)
		add(fmt.Sprintf("memfd_create %#x|MFD_EXEC", f), "memfd_create", eperm, 0, f|mfdExec)
		add(fmt.Sprintf("memfd_create %#x|MFD_EXEC, high bits set", f), "memfd_create", eperm, 0, 1<<32|f|mfdExec)
	}

	sigchld := uint64(unix.SIGCHLD)
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	for ns, f := range map[string]uint64{"user": unix.CLONE_NEWUSER, "mount": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET,
		"pid": unix.CLONE_NEWPID, "ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS, "cgroup": unix.CLONE_NEWCGROUP} {
		add("clone new "+ns, "clone", eperm, f|sigchld)
		add("clone new "+ns+", high bits set", "clone", eperm, 1<<32|f|sigchld)
	}
	add("clone fork", "clone", allow, sigchld)
	add("clone thread", "clone", allow, thread)
	add("clone vfork", "clone", allow, unix.CLONE_VM|unix.CLONE_VFORK|sigchld)

	for fam := uint64(0); fam <= 46; fam++ {
		switch fam {
		case unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK:
			continue
		}
		add(fmt.Sprintf("socket family %d", fam), "socket", eperm, fam, unix.SOCK_STREAM, 0)
		add(fmt.Sprintf("socket family %d raw", fam), "socket", eperm, fam, unix.SOCK_RAW, 0)
		add(fmt.Sprintf("socket family %d dgram", fam), "socket", eperm, fam, unix.SOCK_DGRAM, 0)
	}
	for _, fam := range []uint64{unix.AF_INET, unix.AF_INET6} {
		for _, typ := range []uint64{unix.SOCK_RAW, unix.SOCK_PACKET} {
			add(fmt.Sprintf("socket %d type %d", fam, typ), "socket", eperm, fam, typ, 0)
			add(fmt.Sprintf("socket %d type %d nonblocking", fam, typ), "socket", eperm, fam, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		}
		for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
			add(fmt.Sprintf("socket %d type %d", fam, typ), "socket", allow, fam, typ|unix.SOCK_CLOEXEC, 0)
		}
	}
	add("socket unix", "socket", allow, unix.AF_UNIX, unix.SOCK_STREAM, 0)
	add("socket netlink route", "socket", allow, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
	for _, proto := range []uint64{unix.NETLINK_SOCK_DIAG, unix.NETLINK_AUDIT, unix.NETLINK_NETFILTER, unix.NETLINK_KOBJECT_UEVENT, unix.NETLINK_GENERIC} {
		add(fmt.Sprintf("socket netlink %d", proto), "socket", eperm, unix.AF_NETLINK, unix.SOCK_RAW, proto)
	}

	for _, v := range []uint64{0x0400000, 0x0040000, 0x0100000, 0x0200000, 0x0800000, 0x0400008} {
		add(fmt.Sprintf("personality %#x", v), "personality", eperm, v)
	}
	for _, v := range []uint64{0, 0x8, 0x20000, 0x20008, 0xffffffff} {
		add(fmt.Sprintf("personality %#x", v), "personality", allow, v)
	}

	for _, n := range []string{"read", "write", "openat", "close", "newfstatat", "statx", "mmap", "mprotect", "munmap", "brk",
		"rt_sigaction", "rt_sigprocmask", "execve", "execveat", "wait4", "exit_group", "futex", "getrandom", "pipe2",
		"dup3", "getdents64", "epoll_pwait", "connect", "ioctl", "prlimit64", "set_robust_list", "rseq", "vfork"} {
		add("everyday "+n, n, allow)
	}
	for _, x := range cases {
		if got := decide(t, s, x.call, x.args...); got != x.want {
			t.Errorf("%s %#x: the profile says %v, the requirements say %v", x.name, x.args, got, x.want)
		}
	}
}
