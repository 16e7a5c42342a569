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
