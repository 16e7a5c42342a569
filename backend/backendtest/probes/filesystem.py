# Filesystem attacks. Env: CANARY is a host path that must stay unreachable.
import os, stat, subprocess

canary = os.environ.get("CANARY", "/nonexistent-canary")


def unreadable(name, path, ok_errors=("ENOENT", "EACCES", "EPERM")):
    e = os_error(lambda: open(path, "rb").read(1))
    report(name, e in ok_errors, f"{path}: {e or 'readable'}")


unreadable("read /etc/shadow", "/etc/shadow")
unreadable("read /root", "/root/.bashrc")
unreadable("read ~/.ssh", os.path.expanduser("~/.ssh/id_rsa"))
unreadable("read /home", "/home")
report("list /home", not os.path.exists("/home"), "exists" if os.path.exists("/home") else "absent")
unreadable("read host canary", canary)
for via in ("/proc/1/root", "/proc/self/root", "/proc/1/cwd", "/proc/self/cwd/../.."):
    unreadable("read canary via " + via, via + canary)
unreadable("read docker config", "/etc/docker/daemon.json")
unreadable("read airlock config", "/etc/airlock/keys")
unreadable("read /var", "/var/lib/dpkg/status")

# descriptors: only stdio, none pointing at a host folder
fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
extra = [fd for fd in fds if fd > 2]
# listdir itself holds one fd open while it reads
report("only fds 0-2 open", len(extra) <= 1, f"fds={fds}")
links = {}
for fd in fds:
    try:
        links[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as ex:
        links[fd] = "?" + str(ex.errno)
# a backend that passes stdio through FIFOs names their folder inside;
# once opened they are unlinked
stdio_dir = os.environ.get("STDIO_DIR", "")
def stdio_fifo(fd, l):
    return stdio_dir != "" and fd <= 2 and l.startswith(stdio_dir + "/") and l.endswith(" (deleted)")
bad = {fd: l for fd, l in links.items() if l.startswith("/") and not (l.startswith("/dev/null") or l.startswith("/proc/") or stdio_fifo(fd, l))}
report("fds point at nothing on the host", not bad, f"links={links}")
report("cwd is /workspace", os.readlink("/proc/self/cwd") == "/workspace", os.readlink("/proc/self/cwd"))
report("root is /", os.readlink("/proc/self/root") == "/", os.readlink("/proc/self/root"))

# writes outside the writable folders
for path in ("/usr/airlock-probe", "/etc/airlock-probe", "/airlock-probe", "/workspace/airlock-probe",
             "/workspace/input/airlock-probe", "/bin/airlock-probe", "/etc/passwd"):
    e = os_error(lambda: open(path, "ab").write(b"x"))
    report("write " + path, e in ("EROFS", "EACCES", "EPERM"), e or "written")
for path in ("/tmp/ok", "/workspace/output/ok", "/dev/shm/ok"):
    e = os_error(lambda: open(path, "wb").write(b"x"))
    report("write allowed in " + os.path.dirname(path), e == "", e or "written")
    try:
        os.unlink(path)
    except OSError:
        pass

# remount the root read-write, mount over /usr
MS_REMOUNT, MS_BIND = 32, 4096
r = libc.mount(b"none", b"/", None, MS_REMOUNT, None)
report("remount / rw", r != 0, f"result={r} errno={ctypes.get_errno()}")
r = libc.mount(b"tmpfs", b"/usr", b"tmpfs", 0, None)
report("mount tmpfs over /usr", r != 0, f"result={r} errno={ctypes.get_errno()}")

# /proc and /sys
def is_null_mask(path):
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3


def write_unbuffered(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


for path in ("/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger",
             "/proc/sys/kernel/core_pattern", "/sys/kernel/uevent_helper", "/sys/fs/cgroup/cgroup.procs",
             "/proc/1/oom_score_adj"):
    e = os_error(lambda: write_unbuffered(path, b"1"))
    if e == "" and path.startswith("/proc/") and is_null_mask(path):
        # the mask (below) took the write: it reached /dev/null
        report("write " + path, True, "written to the /dev/null bound over it")
        continue
    report("write " + path, e != "", e or "written")
# lowering one's own oom score (1000, so that the host kills sandboxed
# code first under memory pressure) needs CAP_SYS_RESOURCE
e = os_error(lambda: write_unbuffered("/proc/self/oom_score_adj", b"0"))
report("lower /proc/self/oom_score_adj", e != "", e or "written")

# /proc by name: each file that reveals or changes host state is masked
# (an empty /dev/null bound over it), each such folder is masked by an
# empty read-only folder, and sys, irq, bus and fs are read-only mounts. A
# name this kernel's /proc lacks is reported absent, which is as safe, and
# told apart from masked.
PROC_MASKED_FILES = ("kcore", "keys", "key-users", "latency_stats", "timer_list", "timer_stats", "sched_debug",
                     "kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "config.gz", "vmallocinfo", "sysrq-trigger")
PROC_MASKED_DIRS = ("acpi", "scsi", "asound", "firmware", "driver", "tty")
PROC_READ_ONLY = ("sys", "irq", "bus", "fs")


def mount_options():
    """Mount point -> its per-mount options, from this process's view."""
    out = {}
    for line in open("/proc/self/mountinfo").read().splitlines():
        f = line.split(" ")
        out[f[4].replace("\\040", " ")] = set(f[5].split(","))
    return out


mounts = mount_options()
for name in PROC_MASKED_FILES:
    path = "/proc/" + name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        report(path + " masked", True, "absent: this kernel's /proc has no " + name)
        continue
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
        got = f"{len(data)} bytes read"
    except OSError as ex:
        data, got = None, "unreadable: " + errno.errorcode.get(ex.errno, str(ex.errno))
    null = stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    if null and data == b"":
        report(path + " masked", True, "masked: /dev/null (char 1:3) bound over it, reads empty")
    else:
        kind = "char %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else stat.filemode(st.st_mode)
        report(path + " masked", False, f"not masked: {kind}, {got}")
for name in PROC_MASKED_DIRS:
    path = "/proc/" + name
    if not os.path.lexists(path):
        report(path + " masked", True, "absent: this kernel's /proc has no " + name)
        continue
    try:
        entries = os.listdir(path)
    except OSError as ex:
        entries = ["unreadable: " + errno.errorcode.get(ex.errno, str(ex.errno))]
    ro = "ro" in mounts.get(path, ())
    report(path + " masked", entries == [] and ro,
           "masked: an empty read-only folder" if entries == [] and ro else
           f"not masked: {len(entries)} entries {entries[:5]}, mount {'ro' if ro else 'rw' if path in mounts else 'none'}")
for name in PROC_READ_ONLY:
    path = "/proc/" + name
    if not os.path.lexists(path):
        report(path + " read-only", True, "absent: this kernel's /proc has no " + name)
        continue
    opts = mounts.get(path)
    report(path + " read-only", opts is not None and "ro" in opts,
           "a read-only mount" if opts is not None and "ro" in opts else
           "no mount of its own" if opts is None else "mounted read-write")

# device nodes
e = os_error(lambda: os.mknod("/tmp/dev-null", 0o666 | stat.S_IFCHR, os.makedev(1, 3)))
report("mknod char device", e in ("EPERM", "EACCES", "EROFS"), e or "created")
for path in ("/dev/mem", "/dev/kmsg", "/dev/kvm", "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/port", "/dev/tty", "/dev/console"):
    e = os_error(lambda: open(path, "rb").read(1))
    report("open " + path, e in ("ENOENT", "EACCES", "EPERM"), e or "opened")
devs = sorted(os.listdir("/dev"))
report("/dev is minimal", set(devs) <= {"null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm", "pts", "ptmx", "mqueue"}, devs)

# setuid binaries give nothing
setuid = []
for d in ("/usr/bin", "/usr/sbin", "/bin", "/sbin"):
    try:
        for n in os.listdir(d):
            p = os.path.join(d, n)
            try:
                if os.stat(p).st_mode & stat.S_ISUID:
                    setuid.append(p)
            except OSError:
                pass
    except OSError:
        pass
if setuid:
    import subprocess
    # each tries to print the effective uid through a shell if it can run one;
    # mount is the most telling: it succeeds only with real root
    gained = []
    for p in setuid:
        if os.path.basename(p) == "mount":
            r = subprocess.run([p, "-t", "tmpfs", "none", "/tmp"], capture_output=True)
            if r.returncode == 0:
                gained.append(p)
    report("setuid binaries gain nothing", not gained, f"setuid={setuid[:8]} gained={gained}")
else:
    report("setuid binaries gain nothing", True, "no setuid binary in the image")
mi = open("/proc/self/mountinfo").read().splitlines()
suid = [l for l in mi if "nosuid" not in l.split(" - ")[0]]
report("every mount is nosuid", not suid, suid[:3])

# Written binaries must not run: not from a memfd (execveat on the
# descriptor, or execve of /proc/self/fd/N), not from the writable folders,
# not through the dynamic loader. Every attempt runs in a child; the
# controls run the image's own /bin/true the same ways, so that a broken
# method cannot pass for a refusal.
TRUE = os.path.realpath("/bin/true")
ELF = open(TRUE, "rb").read()
AT_EMPTY_PATH = 0x1000
MFD_CLOEXEC, MFD_NOEXEC_SEAL, MFD_EXEC = 0x1, 0x8, 0x10


def run_child(do):
    """Forks; the child calls do(), which execs /bin/true's bytes or
    raises. Returns (ran, how): ran when the exec happened and exited 0."""
    rd, wr = os.pipe()  # close-on-exec: a successful exec closes it
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            do()
            msg = "returned"
        except OSError as ex:
            msg = errno.errorcode.get(ex.errno, str(ex.errno))
        except BaseException as ex:
            msg = repr(ex)
        os.write(wr, msg.encode())
        os._exit(42)
    os.close(wr)
    msg = os.read(rd, 200).decode()
    os.close(rd)
    _, st = os.waitpid(pid, 0)
    if msg:
        return False, "refused: " + msg
    code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
    return code == 0, f"ran, exit {code}"


def execveat(fd):
    argv = (ctypes.c_char_p * 2)(b"true", None)
    envp = (ctypes.c_char_p * 1)(None)
    r, e = sys_call(322, fd, ctypes.c_char_p(b""), argv, envp, AT_EMPTY_PATH)
    raise OSError(getattr(errno, e, 0), "execveat: " + e)


def fd_path(fd):
    return lambda: os.execv(f"/proc/self/fd/{fd}", ["true"])


ctl = os.open(TRUE, os.O_RDONLY)
ctl_execveat, how = run_child(lambda: execveat(ctl))
report("control: execveat runs the image's /bin/true", ctl_execveat, how)
ctl_fdpath, how = run_child(fd_path(ctl))
report("control: execve of /proc/self/fd/N runs the image's /bin/true", ctl_fdpath, how)
os.close(ctl)


def exec_check(name, ran, how, control):
    if not control:
        report(name, False, f"{how}; inconclusive: the control run of /bin/true failed the same way")
    else:
        report(name, not ran, how)


for flags, label in ((0, "flags 0"), (MFD_CLOEXEC, "MFD_CLOEXEC"), (MFD_EXEC, "MFD_EXEC"), (MFD_NOEXEC_SEAL, "MFD_NOEXEC_SEAL")):
    try:
        fd = os.memfd_create("airlock-probe", flags)
        made = ""
    except OSError as ex:
        fd, made = -1, errno.errorcode.get(ex.errno, str(ex.errno))
    if flags == MFD_EXEC:
        # the kernel alone refuses MFD_EXEC too where vm.memfd_noexec is 2
        try:
            scope = open("/proc/sys/vm/memfd_noexec").read().strip()
        except OSError:
            scope = "?"
        judge("memfd_create MFD_EXEC refused", made or "success", "EPERM", "EACCES" if scope == "2" else "success",
              f"vm.memfd_noexec={scope}")
    else:
        # the memfd checks below mean something only if the memfd exists
        report(f"memfd_create {label} works", fd >= 0, made or "created")
    if fd < 0:
        for how in ("execveat", "execve /proc/self/fd/N"):
            report(f"exec of a memfd ({label}) via {how}", True, f"no memfd: memfd_create {made}")
        continue
    os.write(fd, ELF)
    try:
        os.fchmod(fd, 0o755)
    except OSError:
        pass  # a sealed memfd keeps its mode
    ran, how = run_child(lambda: execveat(fd))
    exec_check(f"exec of a memfd ({label}) via execveat", ran, how, ctl_execveat)
    ran, how = run_child(fd_path(fd))
    exec_check(f"exec of a memfd ({label}) via execve /proc/self/fd/N", ran, how, ctl_fdpath)
    os.close(fd)


def loader():
    for line in open("/proc/self/maps"):
        f = line.split()
        if len(f) >= 6 and os.path.basename(f[5]).startswith("ld-linux"):
            return f[5]
    return "/lib64/ld-linux-x86-64.so.2"


LDSO = loader()
r = subprocess.run([LDSO, TRUE], capture_output=True)
ctl_ldso = r.returncode == 0
report("control: the loader runs the image's /bin/true", ctl_ldso, f"{LDSO} {TRUE}: exit {r.returncode} {r.stderr[:200]!r}")
for d in ("/tmp", "/dev/shm", "/workspace/output"):
    path = d + "/airlock-true"
    try:
        with open(path, "wb") as f:
            f.write(ELF)
        os.chmod(path, 0o755)
    except OSError as ex:
        # nothing to run: inconclusive, not a refusal
        report(f"exec of a binary written to {d}", False, "could not write it: " + errno.errorcode.get(ex.errno, ""))
        continue
    ran, how = run_child(lambda: os.execv(path, ["true"]))
    exec_check(f"exec of a binary written to {d}", ran, how, ctl_fdpath)
    r = subprocess.run([LDSO, path], capture_output=True)
    exec_check(f"the loader runs a binary written to {d}", r.returncode == 0,
               f"{LDSO} {path}: exit {r.returncode} {r.stderr.strip()[:200]!r}", ctl_ldso)
    os.unlink(path)

# fill the disk, the inodes, /dev/shm, and write one huge file
limit = int(os.environ.get("DISK_BYTES", "0"))
def fill(path):
    written = 0
    chunk = b"\0" * (1 << 20)
    try:
        with open(path, "wb") as f:
            while written < 4 * limit + (64 << 20):
                f.write(chunk)
                written += len(chunk)
    except OSError as ex:
        return written, errno.errorcode.get(ex.errno)
    return written, ""
w, e = fill("/tmp/fill")
report("fill /tmp stops at the disk cap", e in ("ENOSPC", "EFBIG") and w <= limit, f"wrote {w} of cap {limit}: {e}")
w2, e2 = fill("/dev/shm/fill")
report("/dev/shm shares the cap", e2 in ("ENOSPC", "EFBIG") and w + w2 <= limit + (1 << 20), f"shm wrote {w2}: {e2}")
os.unlink("/tmp/fill")
os.unlink("/dev/shm/fill")
inodes = int(os.environ.get("DISK_INODES", "0"))
if os.environ.get("INODE_FILL") == "no":
    report("inodes stop at the cap", False, "not tried: the backend has no inode cap")
else:
    n, e = 0, ""
    try:
        os.mkdir("/tmp/inodes")
        while n < 10_000_000:
            open(f"/tmp/inodes/{n}", "w").close()
            n += 1
    except OSError as ex:
        e = errno.errorcode.get(ex.errno)
    report("inodes stop at the cap", e == "ENOSPC" and n <= inodes, f"created {n} of cap {inodes}: {e}")
    for k in range(n):
        os.unlink(f"/tmp/inodes/{k}")
    os.rmdir("/tmp/inodes")
