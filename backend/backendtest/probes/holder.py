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
mq = rt.mq_open(("/" + mark).encode(), os.O_CREAT | os.O_RDWR, 0o666, None)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + mark)
s.listen(1)
report("holder ready", shm >= 0 and mq >= 0, f"shm={shm} mq={mq}")
sys.argv[0] = mark
time.sleep(float(os.environ.get("HOLD", "30")))
