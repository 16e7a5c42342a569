package nsinit

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// This file pins the seccomp filter to the security requirements
// (SECURITY-SUITE.md, "Privileges", and the README's seccomp paragraph),
// written out by hand. Nothing here is read from syscallTable: the
// compiled program is run in runBPF and its answers compared with these
// lists, so a wrong entry in the table fails the test.

// refusal is one system call that must be refused, and how.
type refusal struct {
	name string
	nr   uint32
	want uint32 // retEPERM, retENOSYS or retKill
}

// mustRefuse lists every x86_64 system call the sandbox must never be
// allowed to make, whatever its arguments.
var mustRefuse = []refusal{
	// namespaces: new ones, or joining another
	{"unshare", unix.SYS_UNSHARE, retEPERM},
	{"setns", unix.SYS_SETNS, retEPERM},
	// the mount family, pivot_root and chroot, and the mount tables
	{"mount", unix.SYS_MOUNT, retEPERM},
	{"umount2", unix.SYS_UMOUNT2, retEPERM},
	{"pivot_root", unix.SYS_PIVOT_ROOT, retEPERM},
	{"chroot", unix.SYS_CHROOT, retEPERM},
	{"fsopen", unix.SYS_FSOPEN, retEPERM},
	{"fsconfig", unix.SYS_FSCONFIG, retEPERM},
	{"fsmount", unix.SYS_FSMOUNT, retEPERM},
	{"fspick", unix.SYS_FSPICK, retEPERM},
	{"move_mount", unix.SYS_MOVE_MOUNT, retEPERM},
	{"open_tree", unix.SYS_OPEN_TREE, retEPERM},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR, retEPERM},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR, retEPERM},
	{"statmount", unix.SYS_STATMOUNT, retEPERM},
	{"listmount", unix.SYS_LISTMOUNT, retEPERM},
	{"listns", unix.SYS_LISTNS, retEPERM},
	{"swapon", unix.SYS_SWAPON, retEPERM},
	{"swapoff", unix.SYS_SWAPOFF, retEPERM},
	{"quotactl", unix.SYS_QUOTACTL, retEPERM},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD, retEPERM},
	// file handles bypass the path walk (and Landlock)
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, retEPERM},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, retEPERM},
	// filesystem-wide watches
	{"fanotify_init", unix.SYS_FANOTIFY_INIT, retEPERM},
	{"fanotify_mark", unix.SYS_FANOTIFY_MARK, retEPERM},
	// keys
	{"keyctl", unix.SYS_KEYCTL, retEPERM},
	{"add_key", unix.SYS_ADD_KEY, retEPERM},
	{"request_key", unix.SYS_REQUEST_KEY, retEPERM},
	// the kernel's attack surface and state
	{"bpf", unix.SYS_BPF, retEPERM},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, retEPERM},
	{"userfaultfd", unix.SYS_USERFAULTFD, retEPERM},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP, retEPERM},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER, retEPERM},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER, retEPERM},
	{"kexec_load", unix.SYS_KEXEC_LOAD, retEPERM},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, retEPERM},
	{"init_module", unix.SYS_INIT_MODULE, retEPERM},
	{"finit_module", unix.SYS_FINIT_MODULE, retEPERM},
	{"delete_module", unix.SYS_DELETE_MODULE, retEPERM},
	{"create_module", unix.SYS_CREATE_MODULE, retEPERM},
	{"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS, retEPERM},
	{"query_module", unix.SYS_QUERY_MODULE, retEPERM},
	{"syslog", unix.SYS_SYSLOG, retEPERM},
	{"reboot", unix.SYS_REBOOT, retEPERM},
	{"iopl", unix.SYS_IOPL, retEPERM},
	{"ioperm", unix.SYS_IOPERM, retEPERM},
	{"modify_ldt", unix.SYS_MODIFY_LDT, retEPERM},
	{"acct", unix.SYS_ACCT, retEPERM},
	{"settimeofday", unix.SYS_SETTIMEOFDAY, retEPERM},
	{"clock_settime", unix.SYS_CLOCK_SETTIME, retEPERM},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME, retEPERM},
	{"adjtimex", unix.SYS_ADJTIMEX, retEPERM},
	{"sethostname", unix.SYS_SETHOSTNAME, retEPERM},
	{"setdomainname", unix.SYS_SETDOMAINNAME, retEPERM},
	{"vhangup", unix.SYS_VHANGUP, retEPERM},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, retEPERM},
	{"nfsservctl", unix.SYS_NFSSERVCTL, retEPERM},
	{"uselib", unix.SYS_USELIB, retEPERM},
	{"_sysctl", unix.SYS__SYSCTL, retEPERM},
	{"memfd_secret", unix.SYS_MEMFD_SECRET, retEPERM},
	{"lsm_set_self_attr", unix.SYS_LSM_SET_SELF_ATTR, retEPERM},
	// other processes: tracing, their memory, their descriptors
	{"ptrace", unix.SYS_PTRACE, retEPERM},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV, retEPERM},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, retEPERM},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD, retEPERM},
	{"kcmp", unix.SYS_KCMP, retEPERM},
	{"process_madvise", unix.SYS_PROCESS_MADVISE, retEPERM},
	{"process_mrelease", unix.SYS_PROCESS_MRELEASE, retEPERM},
	{"migrate_pages", unix.SYS_MIGRATE_PAGES, retEPERM},
	{"move_pages", unix.SYS_MOVE_PAGES, retEPERM},
	// clone3 hides its flags in memory: ENOSYS, so that libc falls back
	// to clone, whose flags the filter reads
	{"clone3", unix.SYS_CLONE3, retENOSYS},
	// numbers no x86_64 kernel assigns, or assigns to removed calls:
	// ENOSYS, as the kernel itself would say
	{"afs_syscall", 183, retENOSYS},
	{"tuxcall", 184, retENOSYS},
	{"security", 185, retENOSYS},
	{"vserver", 236, retENOSYS},
	{"unassigned 337", 337, retENOSYS},
	{"unassigned 423", 423, retENOSYS},
	{"number 1000", 1000, retENOSYS},
	{"number 0x3fffffff", 0x3fffffff, retENOSYS},
}

// argCase is one system call with arguments and the answer it must get.
type argCase struct {
	name string
	nr   uint32
	args []uint64
	want uint32
}

// Values written out here rather than taken from the filter's constants.
const (
	pinTIOCSTI           = 0x5412
	pinTIOCLINUX         = 0x541c
	pinFIONBIO           = 0x5421
	pinFIONREAD          = 0x541b
	pinFIOCLEX           = 0x5451
	pinMFDCloexec        = 0x1
	pinMFDAllowSealing   = 0x2
	pinMFDHugetlb        = 0x4
	pinMFDNoexecSeal     = 0x8
	pinMFDExec           = 0x10
	pinMFDHuge2MB        = 21 << 26
	pinReadImpliesExec   = 0x0400000
	pinAddrNoRandomize   = 0x0040000
	pinMmapPageZero      = 0x0100000
	pinAddrCompatLayout  = 0x0200000
	pinAddrLimit32Bit    = 0x0800000
	pinAddrLimit3GB      = 0x8000000
	pinPerLinux32        = 0x0008
	pinUname26           = 0x0020000
	pinPersonalityQuery  = 0xffffffff
	pinHigh              = uint64(1) << 32 // set above what the kernel reads of an int argument
	pinThreadCloneFlags  = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
	pinVforkCloneFlags   = unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)
	pinForkCloneFlags    = unix.CLONE_CHILD_SETTID | unix.CLONE_CHILD_CLEARTID | uint64(unix.SIGCHLD)
	pinNetlinkSockDiag   = 4
	pinNetlinkXfrm       = 6
	pinNetlinkAudit      = 9
	pinNetlinkNetfilter  = 12
	pinNetlinkUevent     = 15
	pinNetlinkGeneric    = 16
	pinNetlinkRoute      = 0
	pinAFMax             = 46
	pinSockPacket        = 10
	pinSockRaw           = 3
	pinSockSeqpacket     = 5
	pinSockNonblockClose = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
)

// namespaceFlags are clone's flags that make a new namespace.
var namespaceFlags = map[string]uint64{
	"user": unix.CLONE_NEWUSER, "mount": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET, "pid": unix.CLONE_NEWPID,
	"ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS, "cgroup": unix.CLONE_NEWCGROUP,
}

// argPins are the argument checks the requirements name: clone's
// namespace flags, socket families and types, terminal injection ioctls,
// personality values and executable memfds.
func argPins() []argCase {
	var cs []argCase
	add := func(name string, nr uint32, want uint32, args ...uint64) {
		cs = append(cs, argCase{name, nr, args, want})
	}
	// clone: any namespace flag is refused, alone, with a fork's or a
	// thread's flags, or with bits above the 32 the filter reads set
	for ns, f := range namespaceFlags {
		add("clone new "+ns+" namespace", unix.SYS_CLONE, retEPERM, f)
		add("clone new "+ns+" namespace, as a fork", unix.SYS_CLONE, retEPERM, f|uint64(unix.SIGCHLD))
		add("clone new "+ns+" namespace, as a thread", unix.SYS_CLONE, retEPERM, f|pinThreadCloneFlags)
		add("clone new "+ns+" namespace, high bits set", unix.SYS_CLONE, retEPERM, pinHigh|f|uint64(unix.SIGCHLD))
		add("clone new user and "+ns+" namespaces", unix.SYS_CLONE, retEPERM, unix.CLONE_NEWUSER|f|uint64(unix.SIGCHLD))
	}
	add("clone, every namespace flag", unix.SYS_CLONE, retEPERM, unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWNET|
		unix.CLONE_NEWPID|unix.CLONE_NEWIPC|unix.CLONE_NEWUTS|unix.CLONE_NEWCGROUP)
	add("clone as fork", unix.SYS_CLONE, retAllow, uint64(unix.SIGCHLD))
	add("clone as glibc's fork", unix.SYS_CLONE, retAllow, pinForkCloneFlags)
	add("clone as a thread", unix.SYS_CLONE, retAllow, pinThreadCloneFlags)
	add("clone as vfork (posix_spawn)", unix.SYS_CLONE, retAllow, pinVforkCloneFlags)
	add("clone with a pidfd", unix.SYS_CLONE, retAllow, unix.CLONE_PIDFD|uint64(unix.SIGCHLD))

	// socket: only unix, inet, inet6 and netlink's route protocol; never
	// raw or packet types
	for fam := uint64(0); fam <= pinAFMax; fam++ {
		switch fam {
		case unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK:
			continue
		}
		for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, pinSockRaw, pinSockSeqpacket} {
			add(fmt.Sprintf("socket family %d type %d", fam, typ), unix.SYS_SOCKET, retEPERM, fam, typ, 0)
		}
		add(fmt.Sprintf("socket family %d, high bits set", fam), unix.SYS_SOCKET, retEPERM, pinHigh|fam, unix.SOCK_STREAM, 0)
	}
	for _, fam := range []uint64{unix.AF_INET, unix.AF_INET6} {
		for _, typ := range []uint64{pinSockRaw, pinSockPacket} {
			add(fmt.Sprintf("socket inet family %d type %d", fam, typ), unix.SYS_SOCKET, retEPERM, fam, typ, 0)
			add(fmt.Sprintf("socket inet family %d type %d, nonblocking cloexec", fam, typ), unix.SYS_SOCKET, retEPERM, fam, typ|pinSockNonblockClose, 0)
			add(fmt.Sprintf("socket inet family %d type %d, high bits set", fam, typ), unix.SYS_SOCKET, retEPERM, fam, pinHigh|typ, 0)
			add(fmt.Sprintf("socket inet family %d type %d, icmp protocol", fam, typ), unix.SYS_SOCKET, retEPERM, fam, typ, 1)
		}
		for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, pinSockSeqpacket} {
			add(fmt.Sprintf("socket inet family %d type %d", fam, typ), unix.SYS_SOCKET, retAllow, fam, typ, 0)
			add(fmt.Sprintf("socket inet family %d type %d, nonblocking cloexec", fam, typ), unix.SYS_SOCKET, retAllow, fam, typ|pinSockNonblockClose, 0)
		}
	}
	for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, pinSockSeqpacket, unix.SOCK_STREAM | pinSockNonblockClose} {
		add(fmt.Sprintf("socket unix type %d", typ), unix.SYS_SOCKET, retAllow, unix.AF_UNIX, typ, 0)
	}
	for _, proto := range []uint64{pinNetlinkSockDiag, pinNetlinkXfrm, pinNetlinkAudit, pinNetlinkNetfilter, pinNetlinkUevent, pinNetlinkGeneric} {
		add(fmt.Sprintf("socket netlink protocol %d", proto), unix.SYS_SOCKET, retEPERM, unix.AF_NETLINK, pinSockRaw, proto)
		add(fmt.Sprintf("socket netlink protocol %d, high bits set", proto), unix.SYS_SOCKET, retEPERM, unix.AF_NETLINK, pinSockRaw, pinHigh|proto)
	}
	add("socket netlink route", unix.SYS_SOCKET, retAllow, unix.AF_NETLINK, pinSockRaw|unix.SOCK_CLOEXEC, pinNetlinkRoute)
	add("socket netlink route, datagram", unix.SYS_SOCKET, retAllow, unix.AF_NETLINK, unix.SOCK_DGRAM, pinNetlinkRoute)

	// ioctl: terminal input injection and the Linux console's requests
	for _, fd := range []uint64{0, 1, 2, 255} {
		for req, name := range map[uint64]string{pinTIOCSTI: "TIOCSTI", pinTIOCLINUX: "TIOCLINUX"} {
			add(fmt.Sprintf("ioctl %s on fd %d", name, fd), unix.SYS_IOCTL, retEPERM, fd, req)
			add(fmt.Sprintf("ioctl %s on fd %d, high bits set", name, fd), unix.SYS_IOCTL, retEPERM, fd, pinHigh|req)
		}
	}
	for req, name := range map[uint64]string{unix.TCGETS: "TCGETS", unix.TIOCGWINSZ: "TIOCGWINSZ", pinFIONREAD: "FIONREAD",
		pinFIOCLEX: "FIOCLEX", pinFIONBIO: "FIONBIO", unix.TIOCGPGRP: "TIOCGPGRP", unix.TCSETS: "TCSETS"} {
		add("ioctl "+name, unix.SYS_IOCTL, retAllow, 1, req)
	}

	// personality: only the harmless personas and the query
	for _, v := range []uint64{pinReadImpliesExec, pinAddrNoRandomize, pinMmapPageZero, pinAddrCompatLayout,
		pinAddrLimit32Bit, pinAddrLimit3GB, pinReadImpliesExec | pinPerLinux32, pinAddrNoRandomize | pinUname26,
		pinHigh | pinReadImpliesExec, 0x0010} {
		add(fmt.Sprintf("personality %#x", v), unix.SYS_PERSONALITY, retEPERM, v)
	}
	for _, v := range []uint64{0, pinPerLinux32, pinUname26, pinUname26 | pinPerLinux32, pinPersonalityQuery, ^uint64(0)} {
		add(fmt.Sprintf("personality %#x", v), unix.SYS_PERSONALITY, retAllow, v)
	}

	// memfd_create: never an executable memfd (MFD_EXEC), whatever else
	// the flags say; any other flags are allowed
	for _, f := range []uint64{0, pinMFDCloexec, pinMFDAllowSealing, pinMFDCloexec | pinMFDAllowSealing, pinMFDHugetlb,
		pinMFDHugetlb | pinMFDHuge2MB, pinMFDNoexecSeal, pinMFDNoexecSeal | pinMFDCloexec | pinMFDAllowSealing} {
		add(fmt.Sprintf("memfd_create flags %#x", f), unix.SYS_MEMFD_CREATE, retAllow, 0, f)
		add(fmt.Sprintf("memfd_create flags %#x with MFD_EXEC", f), unix.SYS_MEMFD_CREATE, retEPERM, 0, f|pinMFDExec)
		add(fmt.Sprintf("memfd_create flags %#x with MFD_EXEC, high bits set", f), unix.SYS_MEMFD_CREATE, retEPERM, 0, pinHigh|f|pinMFDExec)
	}
	// the kernel reads an unsigned int: bits above 32 alone change nothing
	add("memfd_create, only high bits set", unix.SYS_MEMFD_CREATE, retAllow, 0, pinHigh|pinMFDCloexec)
	add("memfd_create MFD_EXEC, name pointer looks like MFD_EXEC", unix.SYS_MEMFD_CREATE, retEPERM, pinMFDExec, pinMFDExec)
	add("memfd_create, name pointer looks like MFD_EXEC", unix.SYS_MEMFD_CREATE, retAllow, pinMFDExec, pinMFDCloexec)
	return cs
}

// everyday lists calls, with the arguments a program passes, that
// python3, node and bash make on every run: the filter must allow them.
var everyday = []argCase{
	{"read", unix.SYS_READ, nil, retAllow},
	{"write", unix.SYS_WRITE, nil, retAllow},
	{"open", unix.SYS_OPEN, nil, retAllow},
	{"openat", unix.SYS_OPENAT, nil, retAllow},
	{"close", unix.SYS_CLOSE, nil, retAllow},
	{"close_range", unix.SYS_CLOSE_RANGE, nil, retAllow},
	{"stat", unix.SYS_STAT, nil, retAllow},
	{"fstat", unix.SYS_FSTAT, nil, retAllow},
	{"lstat", unix.SYS_LSTAT, nil, retAllow},
	{"newfstatat", unix.SYS_NEWFSTATAT, nil, retAllow},
	{"statx", unix.SYS_STATX, nil, retAllow},
	{"statfs", unix.SYS_STATFS, nil, retAllow},
	{"fstatfs", unix.SYS_FSTATFS, nil, retAllow},
	{"lseek", unix.SYS_LSEEK, nil, retAllow},
	{"pread64", unix.SYS_PREAD64, nil, retAllow},
	{"pwrite64", unix.SYS_PWRITE64, nil, retAllow},
	{"readv", unix.SYS_READV, nil, retAllow},
	{"writev", unix.SYS_WRITEV, nil, retAllow},
	{"access", unix.SYS_ACCESS, nil, retAllow},
	{"faccessat2", unix.SYS_FACCESSAT2, nil, retAllow},
	{"getdents64", unix.SYS_GETDENTS64, nil, retAllow},
	{"getcwd", unix.SYS_GETCWD, nil, retAllow},
	{"chdir", unix.SYS_CHDIR, nil, retAllow},
	{"fchdir", unix.SYS_FCHDIR, nil, retAllow},
	{"mkdir", unix.SYS_MKDIR, nil, retAllow},
	{"mkdirat", unix.SYS_MKDIRAT, nil, retAllow},
	{"rename", unix.SYS_RENAME, nil, retAllow},
	{"renameat2", unix.SYS_RENAMEAT2, nil, retAllow},
	{"unlink", unix.SYS_UNLINK, nil, retAllow},
	{"unlinkat", unix.SYS_UNLINKAT, nil, retAllow},
	{"rmdir", unix.SYS_RMDIR, nil, retAllow},
	{"readlink", unix.SYS_READLINK, nil, retAllow},
	{"readlinkat", unix.SYS_READLINKAT, nil, retAllow},
	{"symlink", unix.SYS_SYMLINK, nil, retAllow},
	{"chmod", unix.SYS_CHMOD, nil, retAllow},
	{"fchmod", unix.SYS_FCHMOD, nil, retAllow},
	{"utimensat", unix.SYS_UTIMENSAT, nil, retAllow},
	{"ftruncate", unix.SYS_FTRUNCATE, nil, retAllow},
	{"fsync", unix.SYS_FSYNC, nil, retAllow},
	{"fcntl", unix.SYS_FCNTL, nil, retAllow},
	{"flock", unix.SYS_FLOCK, nil, retAllow},
	{"dup", unix.SYS_DUP, nil, retAllow},
	{"dup2", unix.SYS_DUP2, nil, retAllow},
	{"dup3", unix.SYS_DUP3, nil, retAllow},
	{"pipe", unix.SYS_PIPE, nil, retAllow},
	{"pipe2", unix.SYS_PIPE2, nil, retAllow},
	{"copy_file_range", unix.SYS_COPY_FILE_RANGE, nil, retAllow},
	{"sendfile", unix.SYS_SENDFILE, nil, retAllow},
	{"getxattr", unix.SYS_GETXATTR, nil, retAllow},
	{"lgetxattr", unix.SYS_LGETXATTR, nil, retAllow},
	{"inotify_init1", unix.SYS_INOTIFY_INIT1, nil, retAllow},
	{"mmap", unix.SYS_MMAP, nil, retAllow},
	{"mprotect", unix.SYS_MPROTECT, nil, retAllow},
	{"munmap", unix.SYS_MUNMAP, nil, retAllow},
	{"mremap", unix.SYS_MREMAP, nil, retAllow},
	{"brk", unix.SYS_BRK, nil, retAllow},
	{"madvise", unix.SYS_MADVISE, nil, retAllow},
	{"mincore", unix.SYS_MINCORE, nil, retAllow},
	{"membarrier", unix.SYS_MEMBARRIER, nil, retAllow},
	{"rt_sigaction", unix.SYS_RT_SIGACTION, nil, retAllow},
	{"rt_sigprocmask", unix.SYS_RT_SIGPROCMASK, nil, retAllow},
	{"rt_sigreturn", unix.SYS_RT_SIGRETURN, nil, retAllow},
	{"rt_sigsuspend", unix.SYS_RT_SIGSUSPEND, nil, retAllow},
	{"sigaltstack", unix.SYS_SIGALTSTACK, nil, retAllow},
	{"kill", unix.SYS_KILL, nil, retAllow},
	{"tgkill", unix.SYS_TGKILL, nil, retAllow},
	{"alarm", unix.SYS_ALARM, nil, retAllow},
	{"setitimer", unix.SYS_SETITIMER, nil, retAllow},
	{"execve", unix.SYS_EXECVE, nil, retAllow},
	{"execveat", unix.SYS_EXECVEAT, nil, retAllow},
	{"vfork", unix.SYS_VFORK, nil, retAllow},
	{"wait4", unix.SYS_WAIT4, nil, retAllow},
	{"waitid", unix.SYS_WAITID, nil, retAllow},
	{"exit", unix.SYS_EXIT, nil, retAllow},
	{"exit_group", unix.SYS_EXIT_GROUP, nil, retAllow},
	{"getpid", unix.SYS_GETPID, nil, retAllow},
	{"getppid", unix.SYS_GETPPID, nil, retAllow},
	{"gettid", unix.SYS_GETTID, nil, retAllow},
	{"getuid", unix.SYS_GETUID, nil, retAllow},
	{"geteuid", unix.SYS_GETEUID, nil, retAllow},
	{"getgid", unix.SYS_GETGID, nil, retAllow},
	{"getegid", unix.SYS_GETEGID, nil, retAllow},
	{"getgroups", unix.SYS_GETGROUPS, nil, retAllow},
	{"getpgrp", unix.SYS_GETPGRP, nil, retAllow},
	{"setpgid", unix.SYS_SETPGID, nil, retAllow},
	{"setsid", unix.SYS_SETSID, nil, retAllow},
	{"getrlimit", unix.SYS_GETRLIMIT, nil, retAllow},
	{"prlimit64", unix.SYS_PRLIMIT64, nil, retAllow},
	{"getrusage", unix.SYS_GETRUSAGE, nil, retAllow},
	{"sysinfo", unix.SYS_SYSINFO, nil, retAllow},
	{"uname", unix.SYS_UNAME, nil, retAllow},
	{"prctl", unix.SYS_PRCTL, nil, retAllow},
	{"arch_prctl", unix.SYS_ARCH_PRCTL, nil, retAllow},
	{"capget", unix.SYS_CAPGET, nil, retAllow},
	{"set_tid_address", unix.SYS_SET_TID_ADDRESS, nil, retAllow},
	{"set_robust_list", unix.SYS_SET_ROBUST_LIST, nil, retAllow},
	{"rseq", unix.SYS_RSEQ, nil, retAllow},
	{"futex", unix.SYS_FUTEX, nil, retAllow},
	{"getrandom", unix.SYS_GETRANDOM, nil, retAllow},
	{"clock_gettime", unix.SYS_CLOCK_GETTIME, nil, retAllow},
	{"clock_getres", unix.SYS_CLOCK_GETRES, nil, retAllow},
	{"clock_nanosleep", unix.SYS_CLOCK_NANOSLEEP, nil, retAllow},
	{"nanosleep", unix.SYS_NANOSLEEP, nil, retAllow},
	{"gettimeofday", unix.SYS_GETTIMEOFDAY, nil, retAllow},
	{"sched_getaffinity", unix.SYS_SCHED_GETAFFINITY, nil, retAllow},
	{"sched_yield", unix.SYS_SCHED_YIELD, nil, retAllow},
	{"poll", unix.SYS_POLL, nil, retAllow},
	{"ppoll", unix.SYS_PPOLL, nil, retAllow},
	{"select", unix.SYS_SELECT, nil, retAllow},
	{"pselect6", unix.SYS_PSELECT6, nil, retAllow},
	{"epoll_create1", unix.SYS_EPOLL_CREATE1, nil, retAllow},
	{"epoll_ctl", unix.SYS_EPOLL_CTL, nil, retAllow},
	{"epoll_wait", unix.SYS_EPOLL_WAIT, nil, retAllow},
	{"epoll_pwait", unix.SYS_EPOLL_PWAIT, nil, retAllow},
	{"eventfd2", unix.SYS_EVENTFD2, nil, retAllow},
	{"signalfd4", unix.SYS_SIGNALFD4, nil, retAllow},
	{"timerfd_create", unix.SYS_TIMERFD_CREATE, nil, retAllow},
	{"connect", unix.SYS_CONNECT, nil, retAllow},
	{"bind", unix.SYS_BIND, nil, retAllow},
	{"listen", unix.SYS_LISTEN, nil, retAllow},
	{"accept4", unix.SYS_ACCEPT4, nil, retAllow},
	{"sendto", unix.SYS_SENDTO, nil, retAllow},
	{"recvfrom", unix.SYS_RECVFROM, nil, retAllow},
	{"sendmsg", unix.SYS_SENDMSG, nil, retAllow},
	{"recvmsg", unix.SYS_RECVMSG, nil, retAllow},
	{"socketpair", unix.SYS_SOCKETPAIR, nil, retAllow},
	{"setsockopt", unix.SYS_SETSOCKOPT, nil, retAllow},
	{"getsockopt", unix.SYS_GETSOCKOPT, nil, retAllow},
	{"getsockname", unix.SYS_GETSOCKNAME, nil, retAllow},
	{"getpeername", unix.SYS_GETPEERNAME, nil, retAllow},
	{"shutdown", unix.SYS_SHUTDOWN, nil, retAllow},
	// with their usual arguments
	{"clone for a thread (python, node)", unix.SYS_CLONE, []uint64{pinThreadCloneFlags}, retAllow},
	{"clone for fork (bash, subprocess)", unix.SYS_CLONE, []uint64{pinForkCloneFlags}, retAllow},
	{"clone for posix_spawn (subprocess, node's child_process)", unix.SYS_CLONE, []uint64{pinVforkCloneFlags}, retAllow},
	{"socket unix stream (node's IPC)", unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0}, retAllow},
	{"socket inet stream (a client to the egress proxy)", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM | pinSockNonblockClose, 0}, retAllow},
	{"socket inet6 datagram (getaddrinfo)", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0}, retAllow},
	{"socket netlink route (getifaddrs)", unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, pinSockRaw | unix.SOCK_CLOEXEC, pinNetlinkRoute}, retAllow},
	{"ioctl TCGETS (isatty)", unix.SYS_IOCTL, []uint64{1, unix.TCGETS}, retAllow},
	{"ioctl TIOCGWINSZ (terminal size)", unix.SYS_IOCTL, []uint64{1, unix.TIOCGWINSZ}, retAllow},
	{"ioctl FIONBIO", unix.SYS_IOCTL, []uint64{3, pinFIONBIO}, retAllow},
	{"ioctl FIOCLEX", unix.SYS_IOCTL, []uint64{3, pinFIOCLEX}, retAllow},
	{"personality query (python's platform module)", unix.SYS_PERSONALITY, []uint64{pinPersonalityQuery}, retAllow},
	{"memfd_create MFD_CLOEXEC (python's os.memfd_create)", unix.SYS_MEMFD_CREATE, []uint64{0, pinMFDCloexec}, retAllow},
	{"memfd_create MFD_CLOEXEC|MFD_ALLOW_SEALING (node, glibc users)", unix.SYS_MEMFD_CREATE, []uint64{0, pinMFDCloexec | pinMFDAllowSealing}, retAllow},
}

func pinFilter(t *testing.T) []unix.SockFilter {
	t.Helper()
	prog, err := buildFilter(unix.AUDIT_ARCH_X86_64, syscallTable, 0x40000000, filterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func retName(r uint32) string {
	switch r {
	case retAllow:
		return "allow"
	case retEPERM:
		return "EPERM"
	case retENOSYS:
		return "ENOSYS"
	case retKill:
		return "kill"
	}
	return fmt.Sprintf("%#x", r)
}

// TestSeccompPinRefusals runs every call the requirements refuse through
// the compiled filter, with assorted arguments: none may get another
// answer than its own.
func TestSeccompPinRefusals(t *testing.T) {
	prog := pinFilter(t)
	argSets := [][]uint64{nil, {0, 0, 0, 0, 0, 0}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)},
		{uint64(unix.SIGCHLD), unix.AF_UNIX, 1}, {3, 0x10, 0x5412}}
	seen := map[uint32]string{}
	for _, r := range mustRefuse {
		if prev, dup := seen[r.nr]; dup {
			t.Errorf("pin lists syscall %d twice: %s and %s", r.nr, prev, r.name)
		}
		seen[r.nr] = r.name
		for _, args := range argSets {
			if got := runBPF(t, prog, seccompData(unix.AUDIT_ARCH_X86_64, r.nr, args...)); got != r.want {
				t.Errorf("%s (%d) with args %#x: filter says %s, the requirements say %s", r.name, r.nr, args, retName(got), retName(r.want))
			}
		}
	}
}

// TestSeccompPinArguments checks the argument rules call by call.
func TestSeccompPinArguments(t *testing.T) {
	prog := pinFilter(t)
	for _, c := range argPins() {
		if got := runBPF(t, prog, seccompData(unix.AUDIT_ARCH_X86_64, c.nr, c.args...)); got != c.want {
			t.Errorf("%s %#x: filter says %s, the requirements say %s", c.name, c.args, retName(got), retName(c.want))
		}
	}
}

// TestSeccompPinOtherABIs: i386 calls (int 0x80) kill the process, and so
// does any other architecture; x32 calls, which share x86_64's audit
// architecture, fail with EPERM, even for calls x86_64 allows.
func TestSeccompPinOtherABIs(t *testing.T) {
	prog := pinFilter(t)
	for _, arch := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM, 0} {
		for _, nr := range []uint32{0, 1, 3, 11, 20, 120, 190, 252, 400, 1000} {
			if got := runBPF(t, prog, seccompData(arch, nr)); got != retKill {
				t.Errorf("arch %#x call %d: %s, want kill", arch, nr, retName(got))
			}
		}
	}
	const x32 = 0x40000000
	for _, nr := range []uint32{unix.SYS_READ, unix.SYS_WRITE, unix.SYS_GETPID, unix.SYS_MOUNT, unix.SYS_CLONE,
		512, 520, 547, 1000, 0x3fffffff, 0xffffffff - x32} {
		if got := runBPF(t, prog, seccompData(unix.AUDIT_ARCH_X86_64, x32|nr)); got != retEPERM {
			t.Errorf("x32 call %#x: %s, want EPERM", x32|nr, retName(got))
		}
	}
}

// TestSeccompEverydayCalls: what python3, node and bash need is allowed.
func TestSeccompEverydayCalls(t *testing.T) {
	prog := pinFilter(t)
	for _, c := range everyday {
		if got := runBPF(t, prog, seccompData(unix.AUDIT_ARCH_X86_64, c.nr, c.args...)); got != c.want {
			t.Errorf("%s %#x: filter says %s; everyday programs need it allowed", c.name, c.args, retName(got))
		}
	}
}

// TestSeccompPinNoInetDatagrams: on hosts whose memory cap cannot count
// UDP buffers (cgroup v1) the filter refuses inet datagram sockets, of
// any flag, and still allows streams and unix datagrams.
func TestSeccompPinNoInetDatagrams(t *testing.T) {
	prog, err := buildFilter(unix.AUDIT_ARCH_X86_64, syscallTable, 0x40000000, filterOptions{noInetDatagrams: true})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		fam, typ uint64
		want     uint32
	}{
		{"udp", unix.AF_INET, unix.SOCK_DGRAM, retEPERM},
		{"udp6, nonblocking", unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK, retEPERM},
		{"udp, close-on-exec, high bits", unix.AF_INET, 1<<40 | unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, retEPERM},
		{"tcp", unix.AF_INET, unix.SOCK_STREAM, retAllow},
		{"tcp6", unix.AF_INET6, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, retAllow},
		{"unix datagram", unix.AF_UNIX, unix.SOCK_DGRAM, retAllow},
	}
	for _, c := range cases {
		if got := runBPF(t, prog, seccompData(unix.AUDIT_ARCH_X86_64, unix.SYS_SOCKET, c.fam, c.typ)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, retName(got), retName(c.want))
		}
	}
	// without the option, udp is allowed
	if got := runBPF(t, pinFilter(t), seccompData(unix.AUDIT_ARCH_X86_64, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM)); got != retAllow {
		t.Errorf("udp without the option: %s, want allow", retName(got))
	}
}
