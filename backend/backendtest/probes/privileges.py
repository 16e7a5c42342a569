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
for name, flag in (("user", CLONE_NEWUSER), ("mount", CLONE_NEWNS), ("net", CLONE_NEWNET), ("pid", CLONE_NEWPID),
                   ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS), ("cgroup", CLONE_NEWCGROUP)):
    blocked(f"unshare {name} namespace", 272, flag)
    r, e = sys_call(56, flag | SIGCHLD, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    report(f"clone into a new {name} namespace", r < 0 and e in ("EPERM", "ENOSYS", "EINVAL"), f"result={r} errno={e}")
args = (ctypes.c_uint64 * 11)(CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)
r, e = sys_call(435, ctypes.addressof(args), 88)
if r == 0:
    os._exit(0)
report("clone3 with a new user namespace", r < 0 and e in ("EPERM", "ENOSYS"), f"result={r} errno={e}")
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
blocked("setns", 308, fd, 0)
os.close(fd)

blocked("mount", 165, 0, 0, 0, 0, 0)
blocked("umount2", 166, 0, 0)
blocked("pivot_root", 155, 0, 0)
blocked("chroot", 161, ctypes.c_char_p(b"/tmp"))
blocked("fsopen", 430, ctypes.c_char_p(b"tmpfs"), 0)
blocked("fsmount", 432, 0, 0, 0)
blocked("move_mount", 429, 0, 0, 0, 0, 0)
blocked("open_tree", 428, -100, ctypes.c_char_p(b"/"), 1)
blocked("mount_setattr", 442, 0, 0, 0, 0, 0)

blocked("ptrace attach to pid 1", 101, 16, 1, 0, 0)
blocked("ptrace traceme", 101, 0, 0, 0, 0)
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_uint64 * 2)(ctypes.addressof(buf), 16)
blocked("process_vm_readv from pid 1", 310, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0)
pfd, _ = sys_call(434, 1, 0)
blocked("pidfd_getfd from pid 1", 438, max(pfd, 0), 0, 0)
if pfd >= 0:
    os.close(pfd)

for name, nr, args in (
    ("keyctl", 250, (0, 0, 0, 0, 0)), ("add_key", 248, (ctypes.c_char_p(b"user"), ctypes.c_char_p(b"x"), 0, 0, -2)),
    ("request_key", 249, (0, 0, 0, 0)), ("bpf", 321, (0, 0, 0)), ("perf_event_open", 298, (0, 0, -1, -1, 0)),
    ("userfaultfd", 323, (0,)), ("io_uring_setup", 425, (8, 0)), ("io_uring_enter", 426, (0, 0, 0, 0, 0, 0)),
    ("kexec_load", 246, (0, 0, 0, 0)), ("kexec_file_load", 320, (0, 0, 0, 0, 0)), ("init_module", 175, (0, 0, 0)),
    ("finit_module", 313, (0, 0, 0)), ("delete_module", 176, (0, 0)),
    ("open_by_handle_at", 304, (0, 0, 0)), ("name_to_handle_at", 303, (0, 0, 0, 0, 0)), ("syslog", 103, (3, 0, 0)),
    ("reboot", 169, (0, 0, 0, 0)), ("iopl", 172, (3,)), ("ioperm", 173, (0, 1, 1)), ("acct", 163, (0,)),
    ("swapon", 167, (0, 0)), ("settimeofday", 164, (0, 0)), ("clock_settime", 227, (0, 0)),
    ("sethostname", 170, (ctypes.c_char_p(b"x"), 1)), ("quotactl", 179, (0, 0, 0, 0)), ("lookup_dcookie", 212, (0, 0, 0)),
    ("fanotify_init", 300, (0, 0)), ("kcmp", 312, (1, 1, 0, 0, 0)), ("modify_ldt", 154, (0, 0, 0)),
):
    blocked(name, nr, *args)

# i386 and x32 system calls
import subprocess
x32 = sys_call(0x40000000 + 39)  # x32 getpid
report("x32 system calls refused", x32[0] < 0, f"result={x32[0]} errno={x32[1]}")

# TIOCSTI injects input into a terminal
TIOCSTI = 0x5412
c = ctypes.c_char(b"x")
r = libc.ioctl(0, TIOCSTI, ctypes.byref(c))
report("TIOCSTI refused", r < 0, f"errno={ctypes.get_errno()}")

# personality with READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE
for val in (0x0400000, 0x0040000):
    r, e = sys_call(135, val)
    report(f"personality {val:#x} refused", r < 0 and e == "EPERM", f"result={r} errno={e}")

for fam, typ, name in ((socket.AF_PACKET, socket.SOCK_RAW, "packet"), (socket.AF_INET, socket.SOCK_RAW, "raw inet"),
                       (socket.AF_INET6, socket.SOCK_RAW, "raw inet6"), (40, socket.SOCK_STREAM, "vsock"),
                       (38, socket.SOCK_SEQPACKET, "alg"), (socket.AF_NETLINK, socket.SOCK_RAW, "netlink audit")):
    proto = 9 if name == "netlink audit" else 0
    e = os_error(lambda: socket.socket(fam, typ, proto).close())
    report(f"{name} socket refused", e in ("EPERM", "EACCES", "EAFNOSUPPORT"), e or "created")
