# Sandbox A of the isolation test: sets up what sandbox B must not see,
# prints READY, then waits.
import os, socket, sys, time
mark = os.environ["MARK"]
open(f"/tmp/{mark}", "w").write("secret")
libc.shmget.restype = ctypes.c_int
shm = libc.shmget(int(os.environ["SHM_KEY"]), 4096, 0o1666)
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
except OSError:
    rt = libc
# a small queue: a sandbox may cap the bytes its user's queues hold
# (Docker's remapped user namespaces refuse the default 80 KiB one)
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
attr = MqAttr(0, 1, 64, 0)
mq = rt.mq_open(("/" + mark).encode(), os.O_CREAT | os.O_RDWR, 0o666, ctypes.byref(attr))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + mark)
s.listen(1)
report("holder ready", shm >= 0 and mq >= 0, f"shm={shm} mq={mq}")
sys.argv[0] = mark
time.sleep(float(os.environ.get("HOLD", "30")))
