# Landlock: actions that mounts, file permissions and the seccomp filter
# all allow, so that only Landlock refuses them (each was checked with
# Landlock left out: every one then succeeds). Env: HOLDER_PID is a process
# of another command running in this sandbox, listening on the abstract
# unix socket MARK.
#
# Writes: Landlock lets the sandbox write only beneath /tmp,
# /workspace/output, /dev/shm and /dev/mqueue, and never make device
# nodes. /proc is mounted read-write, and a process owns its own
# /proc/self files, so writing them is Landlock's refusal alone; so is a
# whiteout (a char device 0:0, which needs no CAP_MKNOD) in /tmp.
#
# Scoping (Landlock ABI 6): every command runs in a Landlock domain of
# its own. Two commands of one sandbox run as the same uid in the same
# namespaces, so the kernel alone lets each signal the other and reach the
# other's abstract sockets; Landlock refuses both.
import os, signal, socket, stat

mark = os.environ["MARK"]
holder = int(os.environ["HOLDER_PID"])


def err(fn):
    e = os_error(fn)
    return e or "success"


def refused_by_landlock(name, fn, control=None, control_name=""):
    """fn must fail with EACCES or EPERM; control, the same kind of action
    Landlock allows, must work, or the check is inconclusive."""
    if control is not None:
        c = err(control)
        if c != "success":
            report(name, False, f"inconclusive: the control ({control_name}) failed too: {c}")
            return
    e = err(fn)
    report(name, e in ("EACCES", "EPERM"), e + (f"; the control ({control_name}) works" if control else ""))


def write_file(path, data):
    def do():
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return do


def read_file(path):
    return lambda: open(path, "rb").read(64)


refused_by_landlock("landlock: open /proc/self/mem for writing",
                    lambda: os.close(os.open("/proc/self/mem", os.O_RDWR)),
                    lambda: os.close(os.open("/proc/self/mem", os.O_RDONLY)), "opening it read-only")
refused_by_landlock("landlock: write /proc/self/comm", write_file("/proc/self/comm", b"airlock-probe"),
                    read_file("/proc/self/comm"), "reading it")
refused_by_landlock("landlock: write /proc/self/clear_refs", write_file("/proc/self/clear_refs", b"1"))
refused_by_landlock("landlock: write /proc/self/coredump_filter", write_file("/proc/self/coredump_filter", b"0x33"),
                    read_file("/proc/self/coredump_filter"), "reading it")


def mkfifo():
    os.mknod("/tmp/airlock-fifo", stat.S_IFIFO | 0o600)
    os.unlink("/tmp/airlock-fifo")


def whiteout():
    os.mknod("/tmp/airlock-whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    os.unlink("/tmp/airlock-whiteout")


refused_by_landlock("landlock: mknod a whiteout (char 0:0) in /tmp", whiteout, mkfifo, "a FIFO in /tmp")

# scoping: the holder must be there, or a refusal could be ESRCH or
# ECONNREFUSED for want of a target
try:
    alive = mark in open(f"/proc/{holder}/cmdline", "rb").read().decode(errors="replace")
except OSError:
    alive = False


# the controls: a child of this command is in its domain
def child_listening(name):
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + name)
        s.listen(1)
        os.write(wr, b"x")
        signal.pause()
        os._exit(0)
    os.close(wr)
    os.read(rd, 1)
    os.close(rd)
    return pid


def connect(name):
    def do():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\0" + name)
        finally:
            s.close()
    return do


own = child_listening(mark + "-own")
ctl_signal = err(lambda: os.kill(own, 0))
ctl_connect = err(connect(mark + "-own"))
os.kill(own, signal.SIGKILL)
os.waitpid(own, 0)
for name, fn, ctl, ctl_name in (
        ("landlock: signal a process of another command", lambda: os.kill(holder, 0), ctl_signal, "signalling its own child"),
        ("landlock: connect to another command's abstract socket", connect(mark), ctl_connect,
         "connecting to its own child's abstract socket")):
    if not alive:
        report(name, False, f"inconclusive: the other command (pid {holder}) is not running")
    elif ctl != "success":
        report(name, False, f"inconclusive: the control ({ctl_name}) failed too: {ctl}")
    else:
        e = err(fn)
        report(name, e == "EPERM", f"{e}; the control ({ctl_name}) works")
