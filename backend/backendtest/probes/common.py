# Shared helpers for airlock's attack probes. Every probe prints one JSON
# line per check: {"name": ..., "ok": true when the attack was stopped as
# it must be, "detail": ...}. Probes only use the standard library.
import ctypes, errno, json, os, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def report(name, ok, detail=""):
    print(json.dumps({"name": name, "ok": bool(ok), "detail": str(detail)[:500]}), flush=True)


def sys_call(nr, *args):
    """Runs a raw system call; returns (result, errno name)."""
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    e = ctypes.get_errno()
    return r, (errno.errorcode.get(e, str(e)) if r < 0 else "")


def blocked(name, nr, *args, allowed=("EPERM", "ENOSYS", "EACCES")):
    r, e = sys_call(nr, *args)
    report(name, r < 0 and e in allowed, f"result={r} errno={e}")


def os_error(fn):
    """Runs fn; returns the errno name it failed with, or '' on success."""
    try:
        fn()
        return ""
    except OSError as ex:
        return errno.errorcode.get(ex.errno, str(ex.errno))


# Where seccomp refuses a call with EPERM and the kernel would also say
# EPERM (for want of a capability), a probe that accepts EPERM cannot tell
# whether the filter did its work. refused() therefore calls with
# arguments the kernel alone answers otherwise (a bad descriptor, a bad
# pointer, an unknown operation, or a call that would succeed), and
# requires the filter's answer. `kernel` is what this host's kernel says
# to the same call with no seccomp filter, checked by running the probes
# in a build with the filter left out and AIRLOCK_PROBE_EXPECT=kernel,
# which makes every such check require the kernel's answer instead.
EXPECT_KERNEL = os.environ.get("AIRLOCK_PROBE_EXPECT") == "kernel"

# FILTER_ENOSYS names the checks whose calls this backend's filter answers
# with ENOSYS rather than EPERM (Config.FilterENOSYS).
FILTER_ENOSYS = set(filter(None, os.environ.get("AIRLOCK_PROBE_ENOSYS", "").split(",")))


def errno_of(name):
    """The number of an errno name (EOPNOTSUPP and ENOTSUP are one), 0 for
    "success", None for anything else."""
    if name == "success":
        return 0
    v = getattr(errno, name, None) if name.isupper() else None
    return v if isinstance(v, int) else None


def answer(r, e):
    return "success" if r >= 0 else e


def judge(name, got, seccomp, kernel, extra=""):
    """Reports a check whose answer must be `seccomp` (or, with
    AIRLOCK_PROBE_EXPECT=kernel, `kernel`)."""
    want = kernel if EXPECT_KERNEL else seccomp
    ok = errno_of(got) is not None and errno_of(got) == errno_of(want)
    detail = f"{got}; the filter answers {seccomp}, the kernel alone {kernel}"
    if errno_of(seccomp) == errno_of(kernel):
        detail += " (the kernel refuses it as well, for want of a capability or by a sysctl: this check cannot tell the layers apart)"
    report(name, ok, detail + (f"; {extra}" if extra else ""))


def refused(name, nr, *args, seccomp="EPERM", kernel):
    if name in FILTER_ENOSYS:
        seccomp = "ENOSYS"
    r, e = sys_call(nr, *args)
    judge(name, answer(r, e), seccomp, kernel)
    return r


def in_child(fn):
    """Runs fn in a forked child (for calls that would change the probe
    itself if they succeeded) and returns what it returned, a string."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            out = str(fn())
        except BaseException as ex:
            out = "exception " + repr(ex)
        os.write(wr, out.encode())
        os._exit(0)
    os.close(wr)
    out = b""
    while True:
        b = os.read(rd, 4096)
        if not b:
            break
        out += b
    os.close(rd)
    os.waitpid(pid, 0)
    return out.decode()


SYS_CLONE, SYS_CLONE3 = 56, 435


def refused_in_child(name, nr, *args, seccomp="EPERM", kernel):
    def call():
        r, e = sys_call(nr, *args)
        if nr in (SYS_CLONE, SYS_CLONE3) and r == 0:
            os._exit(0)  # a clone that worked, and this is its child
        if nr in (SYS_CLONE, SYS_CLONE3) and r > 0:
            os.waitpid(r, 0)
        return answer(r, e)
    judge(name, in_child(call), seccomp, kernel)
