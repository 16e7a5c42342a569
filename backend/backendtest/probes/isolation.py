# Run in sandbox B while sandbox A holds a process, a file, SysV IPC, a
# POSIX queue and an abstract socket, all marked with MARK.
import os, socket
mark = os.environ["MARK"]
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            procs.append(open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
report("other sandbox's processes invisible", not any(mark in c for c in procs), len(procs))
report("other sandbox's files invisible", not os.path.exists(f"/tmp/{mark}"), "")
key = int(os.environ["SHM_KEY"])
libc.shmget.restype = ctypes.c_int
r = libc.shmget(key, 0, 0)
report("other sandbox's SysV shared memory invisible", r < 0, f"shmget={r} errno={ctypes.get_errno()}")
libc.mq_open.restype = ctypes.c_int
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    r = rt.mq_open(("/" + mark).encode(), os.O_RDONLY)
except OSError:
    r = libc.mq_open(("/" + mark).encode(), os.O_RDONLY)
report("other sandbox's message queue invisible", r < 0, f"mq_open={r} errno={ctypes.get_errno()}")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0" + mark)
    report("other sandbox's abstract socket unreachable", False, "connected")
except OSError as ex:
    report("other sandbox's abstract socket unreachable", True, errno.errorcode.get(ex.errno, str(ex)))
