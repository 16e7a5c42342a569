# Privilege attacks: capabilities, namespaces, mounts, other processes,
# and the kernel's dangerous interfaces. x86_64 syscall numbers.
import os, socket

status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
    report(k + " is 0", int(status.get(k, "1").strip(), 16) == 0, status.get(k))
report("NoNewPrivs is 1", status.get("NoNewPrivs", "").strip() == "1", status.get("NoNewPrivs"))
report("Seccomp is 2", status.get("Seccomp", "").strip() == "2", status.get("Seccomp"))
report("uid is 1000", os.getuid() == 1000 and os.geteuid() == 1000 and os.getgid() == 1000, f"{os.getuid()}/{os.getgid()}")
umap = open("/proc/self/uid_map").read().split()
host = {int(umap[i]): int(umap[i + 1]) for i in range(0, len(umap), 3)}
report("uid 1000 is not host root", 1000 not in host or host[1000] != 0, f"uid_map={umap}")
report("uid 0 is not host root", 0 not in host or host[0] != 0, f"uid_map={umap}")

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP = 0x10000000, 0x20000000, 0x40000000, 0x2000000
SIGCHLD = 17
P = ctypes.c_char_p
NOPATH = P(b"/nonexistent-airlock-probe")

# Every check below calls with arguments that the kernel alone answers
# otherwise than the filter (see refused() in common.py): a new user
# namespace needs no capability, so each namespace is asked for together
# with one, which the kernel alone grants.
for name, flag in (("user", 0), ("mount", CLONE_NEWNS), ("net", CLONE_NEWNET), ("pid", CLONE_NEWPID),
                   ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS), ("cgroup", CLONE_NEWCGROUP)):
    what = "a new user namespace" if name == "user" else f"new user and {name} namespaces"
    refused_in_child(f"unshare {what}", 272, CLONE_NEWUSER | flag, kernel="success")
    refused_in_child(f"clone into {what}", 56, CLONE_NEWUSER | flag | SIGCHLD, 0, 0, 0, 0, kernel="success")
args = (ctypes.c_uint64 * 11)(CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)
refused_in_child("clone3 with a new user namespace", 435, ctypes.addressof(args), 88, seccomp="ENOSYS", kernel="success")
reg = os.open("/etc/passwd", os.O_RDONLY)
refused("setns with a regular file", 308, reg, 0, kernel="EINVAL")
os.close(reg)
refused("setns with a bad descriptor", 308, -1, 0, kernel="EBADF")
fd = os.open("/proc/self/ns/user", os.O_RDONLY)
refused("setns into its own user namespace", 308, fd, CLONE_NEWUSER, kernel="EINVAL")
os.close(fd)
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
refused("setns into a net namespace", 308, fd, CLONE_NEWNET, kernel="EPERM")
os.close(fd)

# the mount family
refused("mount", 165, P(b"none"), NOPATH, P(b"tmpfs"), 0, 0, kernel="ENOENT")
refused("umount2", 166, NOPATH, 0x80000000, kernel="EINVAL")
refused("pivot_root", 155, NOPATH, NOPATH, kernel="EPERM")
refused("chroot", 161, NOPATH, kernel="ENOENT")
refused("fsopen", 430, P(b"tmpfs"), 0, kernel="EPERM")
refused("fsconfig", 431, -1, 0, P(b"ro"), 0, 0, kernel="EINVAL")
refused("fsmount", 432, -1, 0, 0, kernel="EPERM")
refused("fspick", 433, -100, NOPATH, 0, kernel="EPERM")
refused("move_mount", 429, -1, P(b""), -1, P(b""), 0, kernel="EPERM")
r = refused("open_tree of / (no clone)", 428, -100, P(b"/"), 0, kernel="success")
if r >= 0:
    os.close(r)
r = refused("open_tree_attr of / (no clone)", 467, -100, P(b"/"), 0, 0, 0, kernel="success")
if r >= 0:
    os.close(r)
refused("mount_setattr", 442, -1, P(b""), 0x1000, 0, 0, kernel="EINVAL")
refused("statmount", 457, 0, 0, 0, 0, kernel="EFAULT")
refused("listmount", 458, 0, 0, 0, 0, kernel="EFAULT")
refused("listns", 470, 0, 0, 0, 0, kernel="ENOSYS")
refused("swapon", 167, NOPATH, 0x40000000, kernel="EINVAL")
refused("swapoff", 168, NOPATH, kernel="EPERM")
refused("quotactl", 179, 0x800007, 0, 0, 0, kernel="EINVAL")
refused("quotactl_fd", 443, -1, 0x800007, 0, 0, kernel="EBADF")
handle = ctypes.create_string_buffer(256)
mnt = ctypes.c_int(0)
refused("name_to_handle_at", 303, -100, NOPATH, ctypes.addressof(handle), ctypes.addressof(mnt), 0, kernel="ENOENT")
refused("open_by_handle_at", 304, -1, ctypes.addressof(handle), 0, kernel="EINVAL")
FAN_CLASS_NOTIF, FAN_REPORT_FID = 0, 0x200
r = refused("fanotify_init (unprivileged flags)", 300, FAN_CLASS_NOTIF | FAN_REPORT_FID, 0, kernel="success")
if r >= 0:
    os.close(r)
refused("fanotify_mark", 301, -1, 1, 1, -100, P(b"/"), kernel="EBADF")

# keys
refused("keyctl", 250, 9999, 0, 0, 0, 0, kernel="EOPNOTSUPP")
refused("add_key", 248, 0, 0, 0, 0, -2, kernel="EFAULT")
refused("request_key", 249, 0, 0, 0, 0, kernel="EFAULT")

# the kernel's attack surface and state
refused("bpf", 321, 9999, 0, 0, kernel="EINVAL")
refused("perf_event_open", 298, 0, 0, -1, -1, 0, kernel="EFAULT")
# userfaultfd with flags 0 is refused by vm.unprivileged_userfaultfd=0 as
# well; user-mode-only handling needs no privilege at all
refused("userfaultfd", 323, 0, kernel="EPERM")
UFFD_USER_MODE_ONLY, O_CLOEXEC = 1, 0o2000000
for flags, label in ((UFFD_USER_MODE_ONLY, "UFFD_USER_MODE_ONLY"), (O_CLOEXEC | UFFD_USER_MODE_ONLY, "O_CLOEXEC|UFFD_USER_MODE_ONLY")):
    r = refused(f"userfaultfd {label}", 323, flags, kernel="success")
    if r >= 0:
        os.close(r)
try:
    fd = os.open("/dev/userfaultfd", os.O_RDWR | os.O_CLOEXEC)
    USERFAULTFD_IOC_NEW = 0xaa00
    r = libc.ioctl(fd, USERFAULTFD_IOC_NEW, O_CLOEXEC | UFFD_USER_MODE_ONLY)
    report("/dev/userfaultfd", r < 0, f"opened; USERFAULTFD_IOC_NEW result={r} errno={ctypes.get_errno()}")
    os.close(fd)
except OSError as ex:
    e = errno.errorcode.get(ex.errno, str(ex.errno))
    report("/dev/userfaultfd", e in ("ENOENT", "EACCES", "EPERM"), ("absent" if e == "ENOENT" else "refused") + ": " + e)
refused("io_uring_setup", 425, 8, 0, kernel="EFAULT")
refused("io_uring_enter", 426, -1, 0, 0, 0, 0, 0, kernel="EBADF")
refused("io_uring_register", 427, -1, 0, 0, 0, kernel="EINVAL")
# this host's kernel has no kexec, no modules and no iopl/ioperm
refused("kexec_load", 246, 0, 0, 0, 0, kernel="ENOSYS")
refused("kexec_file_load", 320, -1, -1, 0, 0, 0, kernel="ENOSYS")
refused("init_module", 175, 0, 0, P(b""), kernel="ENOSYS")
refused("finit_module", 313, -1, P(b""), 0, kernel="ENOSYS")
refused("delete_module", 176, P(b"airlock-none"), 0, kernel="ENOSYS")
refused("create_module", 174, 0, 0, kernel="ENOSYS")
refused("get_kernel_syms", 177, 0, kernel="ENOSYS")
refused("query_module", 178, 0, 0, 0, 0, 0, kernel="ENOSYS")
refused("syslog", 103, 3, 0, 10, kernel="EPERM")
refused("reboot", 169, 0, 0, 0, 0, kernel="EPERM")
refused("iopl", 172, 3, kernel="ENOSYS")
refused("ioperm", 173, 0, 0, 1, kernel="ENOSYS")
ldt = ctypes.create_string_buffer(16)
refused("modify_ldt (read)", 154, 0, ctypes.addressof(ldt), 16, kernel="success")
refused("acct", 163, NOPATH, kernel="EPERM")
refused("settimeofday", 164, 1, 0, kernel="EFAULT")
ts = ctypes.create_string_buffer(256)
refused("clock_settime", 227, 9999, ctypes.addressof(ts), kernel="EINVAL")
refused("clock_adjtime", 305, 9999, ctypes.addressof(ts), kernel="EINVAL")
refused("adjtimex (read)", 159, ctypes.addressof(ts), kernel="success")
refused("sethostname", 170, P(b"x" * 100), 100, kernel="EPERM")
refused("setdomainname", 171, P(b"x" * 100), 100, kernel="EPERM")
refused("vhangup", 153, kernel="EPERM")
refused("lookup_dcookie", 212, 0, 0, 0, kernel="ENOSYS")
refused("nfsservctl", 180, 0, 0, 0, kernel="ENOSYS")
refused("uselib", 134, NOPATH, kernel="ENOSYS")
refused("_sysctl", 156, 0, kernel="ENOSYS")
r = refused("memfd_secret", 447, 0, kernel="success")
if r >= 0:
    os.close(r)
refused("lsm_set_self_attr", 460, 100, 0, 0, 0, kernel="EINVAL")

# other processes: the kernel alone lets a process trace, read and
# compare itself and its children
refused_in_child("ptrace traceme", 101, 0, 0, 0, 0, kernel="success")
refused("ptrace attach to pid 1", 101, 16, 1, 0, 0, kernel="EPERM")
refused("ptrace peek at a pid that does not exist", 101, 2, 999999999, 0, 0, kernel="ESRCH")
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_uint64 * 2)(ctypes.addressof(buf), 16)
refused("process_vm_readv from itself", 310, os.getpid(), ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0, kernel="success")
refused("process_vm_writev to itself", 311, os.getpid(), ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0, kernel="success")
refused("process_vm_readv from pid 1", 310, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0, kernel="EPERM")
pfd, _ = sys_call(434, os.getpid(), 0)
r = refused("pidfd_getfd from itself", 438, pfd, 0, 0, kernel="success")
if r >= 0:
    os.close(r)
if pfd >= 0:
    os.close(pfd)
pfd, _ = sys_call(434, 1, 0)
refused("pidfd_getfd from pid 1", 438, pfd, 0, 0, kernel="EPERM" if pfd >= 0 else "EBADF")
if pfd >= 0:
    os.close(pfd)
refused("kcmp of itself", 312, os.getpid(), os.getpid(), 0, 0, 0, kernel="success")
refused("process_madvise", 440, -1, 0, 0, 0, 0, kernel="EBADF")
refused("process_mrelease", 448, -1, 0, kernel="EBADF")
refused("move_pages of itself (none)", 279, 0, 0, 0, 0, 0, 0, kernel="success")

# x32 system calls: this kernel has no x32 ABI (ENOSYS); the filter
# refuses them all
refused("x32 getpid", 0x40000000 + 39, kernel="ENOSYS")


# an i386 system call (int 0x80) kills the process
def int80():
    import mmap
    # mov eax, 20 (getpid); int 0x80; ret
    code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return ctypes.CFUNCTYPE(ctypes.c_long)(addr)()


rd, wr = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.write(wr, str(int80()).encode())
    finally:
        os._exit(0)
os.close(wr)
returned = os.read(rd, 100).decode()
os.close(rd)
_, st = os.waitpid(pid, 0)
killed = os.WIFSIGNALED(st) and os.WTERMSIG(st) == 31
how = f"killed by signal {os.WTERMSIG(st)}" if os.WIFSIGNALED(st) else f"returned {returned!r} (getpid is {pid})"
report("i386 system call kills the process", killed != EXPECT_KERNEL,
       f"{how}; the filter kills with SIGSYS, the kernel alone answers it")

# TIOCSTI injects input into a terminal; stdin is no terminal here, so
# the kernel alone says ENOTTY
TIOCSTI, TIOCLINUX = 0x5412, 0x541c
c = ctypes.c_char(b"x")
for req, label in ((TIOCSTI, "TIOCSTI"), (TIOCLINUX, "TIOCLINUX")):
    ctypes.set_errno(0)
    r = libc.ioctl(0, req, ctypes.byref(c))
    judge(f"ioctl {label}", answer(r, errno.errorcode.get(ctypes.get_errno(), "?")), "EPERM", "ENOTTY")

# personality with READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE (in a child: the
# kernel alone would change the probe's own)
for val in (0x0400000, 0x0040000):
    refused_in_child(f"personality {val:#x}", 135, val, kernel="success")

# sockets: the kernel checks CAP_NET_RAW before most arguments, so the
# calls carry one it refuses first: a type past SOCK_MAX, a protocol past
# IPPROTO_MAX
SOCK_MAX = 11
for fam, typ, proto, label, kernel in ((socket.AF_PACKET, SOCK_MAX, 0, "packet", "EINVAL"),
                                      (socket.AF_INET, socket.SOCK_RAW, 300, "raw inet", "EINVAL"),
                                      (socket.AF_INET6, socket.SOCK_RAW, 300, "raw inet6", "EINVAL"),
                                      (40, SOCK_MAX, 0, "vsock", "EINVAL"), (38, SOCK_MAX, 0, "alg", "EINVAL"),
                                      (socket.AF_NETLINK, SOCK_MAX, 9, "netlink audit", "EINVAL")):
    refused(f"{label} socket", 41, fam, typ, proto, kernel=kernel)
