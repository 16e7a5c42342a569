# The folders the code may write, and its inputs, are noexec, nosuid and
# nodev: a copy of /bin/true placed in each cannot be run, neither by
# execve nor by the dynamic loader mapping it (ld.so FILE), and every
# such mount says so in mountinfo. Env: INPUT_TRUE is where the test put
# a copy of /bin/true under /workspace/input (read-only to the code).
import glob, os, shutil, subprocess

loaders = sorted(glob.glob("/lib64/ld-linux*.so*") + glob.glob("/lib/ld-linux*.so*") +
                 glob.glob("/lib/*-linux-gnu/ld-linux*.so*") + glob.glob("/usr/lib/*-linux-gnu/ld-linux*.so*"))
report("a dynamic loader to try", bool(loaders), loaders)


def runs(argv):
    try:
        r = subprocess.run(argv, capture_output=True, timeout=20)
        return r.returncode == 0, f"exit {r.returncode} {r.stderr[:120]!r}"
    except OSError as ex:
        return False, errno.errorcode.get(ex.errno, str(ex.errno))


copies = {}
for d in ("/tmp", "/workspace/output", "/dev/shm"):
    p = os.path.join(d, "airlock-true")
    shutil.copyfile("/bin/true", p)
    os.chmod(p, 0o755)
    copies[d] = p
copies["/workspace/input"] = os.environ.get("INPUT_TRUE", "/workspace/input/true")
for d, p in copies.items():
    ran, how = runs([p])
    report(f"exec of a binary in {d}", not ran, how)
    for ld in loaders[:1]:
        ran, how = runs([ld, p])
        report(f"ld.so of a binary in {d}", not ran, how)

mounts = {}
for line in open("/proc/self/mountinfo").read().splitlines():
    f = line.split(" - ")[0].split()
    if len(f) >= 6:
        mounts[f[4]] = set(f[5].split(","))
for d in copies:
    opts = mounts.get(d)
    for flag in ("noexec", "nosuid", "nodev"):
        report(f"{d} is {flag}", opts is not None and flag in opts, sorted(opts or []))
for d in ("/tmp", "/workspace/output", "/dev/shm"):
    os.unlink(copies[d])
