# Filesystem attacks. Env: CANARY is a host path that must stay unreachable.
import os, stat

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
    report("write " + path, e != "", e or "written")
# lowering one's own oom score (1000, so that the host kills sandboxed
# code first under memory pressure) needs CAP_SYS_RESOURCE
e = os_error(lambda: write_unbuffered("/proc/self/oom_score_adj", b"0"))
report("lower /proc/self/oom_score_adj", e != "", e or "written")
for path in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kallsyms"):
    try:
        data = open(path, "rb").read(4096)
        # kallsyms may stay readable if every address reads as zero
        zeroed = path.endswith("kallsyms") and all(l.startswith(b"0000000000000000") for l in data.splitlines()[:50])
        report("read " + path, len(data) == 0 or zeroed, f"{len(data)} bytes")
    except OSError as ex:
        report("read " + path, True, errno.errorcode.get(ex.errno))

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
n, e = 0, ""
try:
    os.mkdir("/tmp/inodes")
    while n < 10_000_000:
        open(f"/tmp/inodes/{n}", "w").close()
        n += 1
except OSError as ex:
    e = errno.errorcode.get(ex.errno)
inodes = int(os.environ.get("DISK_INODES", "0"))
report("inodes stop at the cap", e == "ENOSPC" and n <= inodes, f"created {n} of cap {inodes}: {e}")
