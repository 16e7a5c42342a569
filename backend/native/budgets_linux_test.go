package native_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// budgetProbe exhausts one of the kernel's per-user budgets and holds it:
// it prints "held N" (how many it got) and sleeps. With "try" it only
// tries once and prints "ok" or the error.
const budgetProbe = `
import ctypes, errno, os, shutil, signal, sys, tempfile, time
libc = ctypes.CDLL(None, use_errno=True)
what, mode = sys.argv[1], sys.argv[2]

class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]

def one(i):
    if what == "inotify":
        fd = libc.inotify_init1(0)
        return fd >= 0
    if what == "watches":
        global wfd
        return libc.inotify_add_watch(wfd, ("%s/w%d" % (wdir, i)).encode(), 0x100) >= 0
    if what == "sigpending":
        return libc.sigqueue(os.getpid(), signal.SIGRTMIN, 0) == 0
    if what == "mqueue":
        attr = MqAttr(0, 10, 8192, 0)
        return libc.mq_open(qname(i), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr)) >= 0

def qname(i):
    return ("/airlock-budget-%d-%d" % (os.getpid(), i)).encode()

# on the host ("try") the watched file lives in a folder of its own, and
# the queue is unlinked: host root's budget must not keep what a run took
wdir = "/tmp" if mode == "hold" else tempfile.mkdtemp()
if what == "watches":
    wfd = libc.inotify_init1(0)
    for i in range(20000 if mode == "hold" else 1):
        open("%s/w%d" % (wdir, i), "w").close()
if what == "sigpending":
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
if mode == "try":
    got = one(0)
    err = errno.errorcode.get(ctypes.get_errno(), "?")
    if what == "mqueue":
        libc.mq_unlink(qname(0))
    shutil.rmtree(wdir)
    print("ok" if got else "failed " + err, flush=True)
    sys.exit(0)
n = 0
while n < 1000000 and one(n):
    n += 1
print("held", n, errno.errorcode.get(ctypes.get_errno(), "?"), flush=True)
time.sleep(120)
`

// TestBudgetsChargedToTheSandbox holds each per-user budget of the kernel
// to exhaustion inside one sandbox and checks that host root and a second
// sandbox can still take from theirs: the sandbox's user namespace belongs
// to a host id of its own, so nothing it holds is charged to root.
func TestBudgetsChargedToTheSandbox(t *testing.T) {
	testenv.Require(t, "root: the sandbox user namespace's owner is chosen only as root", testenv.Root())
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 on the host is needed for the host-side checks: %v", err)
	}
	be := native.New(native.Options{})
	defer be.Close()
	p := backendtest.Policy(t, func(p *sandbox.Policy) {
		p.Limits.Timeout = sandbox.Duration(2 * time.Minute)
		p.Limits.OpenFiles = 4096
		p.Limits.DiskInodes = 40000
	})
	for _, what := range []string{"inotify", "watches", "sigpending", "mqueue"} {
		t.Run(what, func(t *testing.T) {
			a := backendtest.Create(t, be, sandbox.HostImage(), p)
			b := backendtest.Create(t, be, sandbox.HostImage(), p)
			held := backendtest.StartHolder(t, a, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", budgetProbe, what, "hold"}}, 90*time.Second)
			if !strings.HasPrefix(held, "held ") {
				t.Fatalf("holder: %q", held)
			}
			t.Logf("sandbox A holds %s", strings.TrimSpace(held))
			host, err := exec.Command("python3", "-c", budgetProbe, what, "try").CombinedOutput()
			if strings.TrimSpace(string(host)) != "ok" {
				t.Errorf("host root while sandbox A holds %s: %q %v", what, host, err)
			}
			res := backendtest.Exec(t, b, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", budgetProbe, what, "try"}})
			if strings.TrimSpace(res.Stdout) != "ok" {
				t.Errorf("sandbox B while sandbox A holds %s: %q %q", what, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestHostIDs starts 200 sandboxes at once and checks, from the host,
// that each one's user namespace belongs to a host id of its own: never
// root, never another sandbox's.
func TestHostIDs(t *testing.T) {
	testenv.Require(t, "root: host id ranges are leased only as root", testenv.Root())
	const n = 200
	be := native.New(native.Options{})
	defer be.Close()
	p := backendtest.Policy(t, nil)
	insts := make([]sandbox.Instance, n)
	errs := make(chan error, n)
	for k := range n {
		go func() {
			inst, err := be.Create(context.Background(), sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
			insts[k] = inst
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	defer func() {
		for _, inst := range insts {
			if inst != nil {
				_ = inst.Destroy(context.Background())
			}
		}
	}()
	if t.Failed() {
		return
	}
	owners := map[uint32]string{}
	for _, pid := range initPids() {
		uid, err := nsOwner(pid)
		if err != nil {
			t.Fatal(err)
		}
		if uid == 0 {
			t.Errorf("sandbox init %s: its user namespace belongs to host root", pid)
		}
		if other, dup := owners[uid]; dup {
			t.Errorf("sandbox inits %s and %s share the host id %d", pid, other, uid)
		}
		owners[uid] = pid
	}
	if len(owners) != n {
		t.Errorf("found %d sandbox inits with distinct owners, want %d", len(owners), n)
	}
}

// initPids lists the sandbox inits this test process started.
func initPids() []string { return leakcheck.InitPids(os.Getpid()) }

// nsOwner asks the kernel which host uid owns process pid's user namespace.
func nsOwner(pid string) (uint32, error) {
	f, err := os.Open("/proc/" + pid + "/ns/user")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	const nsGetOwnerUID = 0xb704
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		return 0, e
	}
	return uid, nil
}

// socketHoard opens loopback TCP connections and fills their buffers
// without reading, then prints how many bytes the kernel took in all.
const socketHoard = `
import socket, errno
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1024)
conns, total = [], 0
for i in range(400):
    try:
        c = socket.create_connection(srv.getsockname()); s, _ = srv.accept()
    except OSError as e:
        break
    for sock in (c, s):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    c.setblocking(False)
    conns.append((c, s))
    chunk = b"x" * 65536
    while True:
        try:
            total += c.send(chunk)
        except OSError:
            break
print(total)
`

// udpHoard fills loopback UDP receive queues without reading, then prints
// how many bytes the kernel queued in all, or "refused" when the sandbox
// may not make UDP sockets at all.
const udpHoard = `
import socket, errno
try:
    rx = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(200)]
except OSError as e:
    print("refused", errno.errorcode[e.errno]); raise SystemExit
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); tx.setblocking(False)
total = 0
for r in rx:
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    r.bind(("127.0.0.1", 0))
    for _ in range(20000):
        try:
            total += tx.sendto(b"x" * 60000, r.getsockname())
        except OSError:
            break
print(total)
`

// TestSocketBuffersCounted holds loopback TCP buffers past the memory cap:
// the kernel must refuse them (or kill the hoarder), not take them from
// the host. On cgroup v1 they count against a TCP cap of their own.
func TestSocketBuffersCounted(t *testing.T) {
	testenv.Require(t, "root: needs the memory cgroup, which needs root here", testenv.Root())
	be := native.New(native.Options{})
	defer be.Close()
	const memCap = 64 << 20
	inst := backendtest.Create(t, be, sandbox.HostImage(), backendtest.Policy(t, func(p *sandbox.Policy) {
		p.Limits.MemoryBytes = memCap
		p.Limits.OpenFiles = 4096
		p.Limits.Timeout = sandbox.Duration(60 * time.Second)
	}))
	res := backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", socketHoard}})
	if res.OOMKilled {
		t.Logf("the hoarder was killed for memory, as it may be")
		return
	}
	var held int64
	if _, err := fmt.Sscan(res.Stdout, &held); err != nil {
		t.Fatalf("hoarder: %q %q", res.Stdout, res.Stderr)
	}
	if held > memCap {
		t.Errorf("the sandbox held %d MiB in TCP buffers under a memory cap of %d MiB", held>>20, memCap>>20)
	}
	t.Logf("TCP buffers held under a %d MiB cap: %.1f MiB", memCap>>20, float64(held)/(1<<20))
	res = backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", udpHoard}})
	switch f := strings.Fields(res.Stdout); {
	case res.OOMKilled:
		t.Logf("the UDP hoarder was killed for memory, as it may be")
	case len(f) == 2 && f[0] == "refused" && f[1] == "EPERM":
		t.Logf("UDP sockets refused (cgroup v1 cannot count their buffers)")
	case len(f) == 1:
		n, _ := strconv.ParseInt(f[0], 10, 64)
		// queued datagrams are charged at their buffers' size, about
		// twice their payload
		if n > memCap/2 {
			t.Errorf("the sandbox queued %d MiB of UDP payload under a memory cap of %d MiB", n>>20, memCap>>20)
		}
		t.Logf("UDP payload queued under a %d MiB cap: %.1f MiB", memCap>>20, float64(n)/(1<<20))
	default:
		t.Errorf("UDP hoarder: %q %q", res.Stdout, res.Stderr)
	}
}

// TestInputsChargedToTheSandbox puts an input file and checks that its
// pages are charged to the sandbox's cgroup (init's folder, which writes
// inputs), not to the supervisor's.
func TestInputsChargedToTheSandbox(t *testing.T) {
	testenv.Require(t, "root: the memory cgroup needs root here", testenv.Root())
	be := native.New(native.Options{})
	defer be.Close()
	inst := backendtest.Create(t, be, sandbox.HostImage(), backendtest.Policy(t, nil))
	pids := initPids()
	if len(pids) != 1 {
		t.Fatalf("want one sandbox init, found %v", pids)
	}
	usage := func() int64 {
		b, err := os.ReadFile("/proc/" + pids[0] + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 || f[1] != "memory" && f[1] != "" {
				continue
			}
			// v1's memory hierarchy, else the unified one
			file := "/sys/fs/cgroup/memory" + f[2] + "/memory.usage_in_bytes"
			if f[1] == "" {
				file = "/sys/fs/cgroup" + f[2] + "/memory.current"
			}
			if v, err := os.ReadFile(file); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
				return n
			}
		}
		t.Fatalf("no memory cgroup of init found in %q", b)
		return 0
	}
	// a file operation waits until init is in its cgroup, as a start does
	if _, err := inst.Files().Stat(context.Background(), "/workspace/input"); err != nil {
		t.Fatal(err)
	}
	before := usage()
	const size = 32 << 20
	if _, err := inst.Files().Put(context.Background(), "/workspace/input/big.bin", strings.NewReader(strings.Repeat("x", size)), 0); err != nil {
		t.Fatal(err)
	}
	if grew := usage() - before; grew < size*9/10 {
		t.Errorf("a %d MiB input grew the sandbox init's memory charge by %d MiB only", size>>20, grew>>20)
	}
}
