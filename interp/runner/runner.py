# airlock interp runner: one stateful context inside the sandbox.
#
# Started by package interp as
#     python3 -c <this source> airlock-interp <config JSON>
# so that no file of it lies in the sandbox for the code to edit. The
# config names the language, the limits and the FIFO of the first
# transport. Everything here is the standard library; IPython is used when
# it is importable (language "python", runner "auto").
#
# Descriptors. Requests come from the host on the runner's stdin, which is
# moved to a private descriptor (fd 0 becomes /dev/null). Events go back
# as frames (4-byte big-endian length, then one JSON object) on the
# transport: a FIFO read by a relay process that the host started (see
# interp/transport.go for why it is not the runner's own stdout). Fds 1 and
# 2 become pipes that this runner reads itself, so that what the code and
# every subprocess it starts print arrives as stdout and stderr events.
# Private descriptors are close-on-exec; a forked copy of the runner never
# writes a frame (it checks its pid).
#
# For bash and javascript this runner is a supervisor: it starts bash (or
# a node kernel, kernel.js) with those same pipes as its fds 1 and 2 and
# forwards what the kernel reports.

import codecs
import errno
import fcntl
import json
import os
import re
import select
import signal
import stat
import struct
import sys
import termios
import threading
import time

CFG = json.loads(sys.argv[2])
LANGUAGE = CFG["language"]
FRAME_LIMIT = int(CFG["frame_limit"])
OUTPUT_LIMIT = int(CFG["output_limit"])
CALL_LIMIT = int(CFG["call_limit"])
# what of a call's budget stays for the frames that end it
CALL_RESERVE = {"stdout": 65536, "stderr": 65536, "result": 65536, "display": 65536, "error": 8192, "end": 0}
MAIN_PID = os.getpid()
# what one output event carries at most: a frame holds it even if every
# byte takes six in JSON (a control character as \u00XX)
CHUNK = max(1024, min(64 << 10, (FRAME_LIMIT - 1024) // 6))

# --- descriptors -----------------------------------------------------------

REQ = os.dup(0)  # requests from the host; os.dup makes it close-on-exec
DIAG = os.dup(2)  # the runner's own fatal messages: the process's stderr
_null = os.open(os.devnull, os.O_RDWR)
os.dup2(_null, 0)
os.close(_null)
_out_r, _out_w = os.pipe()
_err_r, _err_w = os.pipe()
os.dup2(_out_w, 1)  # inheritable: subprocesses print into the pipes too
os.dup2(_err_w, 2)
os.close(_out_w)
os.close(_err_w)
os.set_blocking(_out_r, False)
os.set_blocking(_err_r, False)
sys.stdin = open(0, "r", closefd=False)
sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def fatal(msg):
    """Says msg on the runner's own stderr and ends the runner."""
    try:
        os.write(DIAG, ("airlock-interp: " + msg + "\n").encode("utf-8", "replace"))
    finally:
        os._exit(70)


def forked():
    return os.getpid() != MAIN_PID


# --- frames ----------------------------------------------------------------


def write_all(fd, b):
    mv = memoryview(b)
    while mv:
        try:
            n = os.write(fd, mv)
        except InterruptedError:
            continue
        mv = mv[n:]


def read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        try:
            b = os.read(fd, n - len(buf))
        except InterruptedError:
            continue
        if not b:
            return None
        buf += b
    return bytes(buf)


def read_request():
    """Reads one request frame from the host; None at end of file."""
    h = read_exact(REQ, 4)
    if h is None:
        return None
    (n,) = struct.unpack(">I", h)
    b = read_exact(REQ, n)
    if b is None:
        return None
    return json.loads(b.decode("utf-8"))


def encode(obj):
    s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        # lone surrogates (from a repr, say) are no UTF-8: U+FFFD instead
        return re.sub("[\ud800-\udfff]", "\ufffd", s).encode("utf-8")


def clip(s, n):
    """Cuts s to at most n UTF-8 bytes, on a character boundary."""
    b = s.encode("utf-8", "surrogatepass")
    if len(b) <= n:
        return s
    return b[:n].decode("utf-8", "ignore")


def fit(obj):
    """Returns obj's frame, shrunk to FRAME_LIMIT: big MIME entries are
    left out with a note, long tracebacks and texts are cut."""
    b = encode(obj)
    if len(b) <= FRAME_LIMIT:
        return b
    budget = FRAME_LIMIT - 4096
    data = obj.get("data")
    if isinstance(data, dict):
        notes = []
        for k in sorted(data, key=lambda k: -len(data[k])):
            if len(encode(obj)) <= FRAME_LIMIT or k == "text/plain":
                continue
            notes.append("[airlock: %s of %d bytes left out: over the frame limit of %d bytes]" % (k, len(data[k]), FRAME_LIMIT))
            del data[k]
        if notes:
            data["text/plain"] = clip(data.get("text/plain", ""), budget // 2) + "\n" + "\n".join(notes)
        if len(encode(obj)) > FRAME_LIMIT:
            data["text/plain"] = clip(data.get("text/plain", ""), budget // 8)
    for key in ("text", "value"):
        if isinstance(obj.get(key), str) and len(encode(obj)) > FRAME_LIMIT:
            obj[key] = clip(obj[key], budget // 4) + "\n[airlock: cut at the frame limit]"
    tb = obj.get("traceback")
    if isinstance(tb, list) and len(encode(obj)) > FRAME_LIMIT:
        obj["traceback"] = [clip(x, 4096) for x in tb[:20]] + ["[airlock: traceback cut at the frame limit]"]
    return encode(obj)


def open_fifo(path, timeout=30.0):
    """Opens for writing the FIFO that the host's relay makes at path, once
    the relay reads it, and unlinks it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
            break
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENXIO) or time.monotonic() > deadline:
                raise
            time.sleep(0.001)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError("transport %s is not a FIFO" % path)
    os.set_blocking(fd, True)
    try:
        os.unlink(path)
    except OSError:
        pass
    return fd


class Transport:
    """The protocol descriptor, the lock that keeps frames whole, and the
    relay's budget: a frame that would not fit in what the relay has left
    (less a reserve for the move) first moves the protocol to a new relay.
    The runner asks for it with a rotate frame; the host starts the relay,
    which makes the FIFO; the old relay's last frame is detach, the new
    one's first is attached."""

    RESERVE = 4096

    def __init__(self):
        self.lock = threading.Lock()
        self.fd = None
        self.seq = 0
        self.used = 0
        self.prefix = CFG["transport_prefix"]
        self.budget = int(CFG["transport_limit"])

    def open(self):
        self.fd = open_fifo(self.prefix + "1")
        self.seq = 1
        with self.lock:
            self._raw(encode({"type": "attached", "seq": 1}))

    def _raw(self, b):
        framed = struct.pack(">I", len(b)) + b
        try:
            write_all(self.fd, framed)
        except OSError as e:
            fatal("the transport failed: %s" % e)
        self.used += len(framed)

    def _rotate(self):
        seq = self.seq + 1
        path = self.prefix + str(seq)
        self._raw(encode({"type": "rotate", "seq": seq, "path": path}))
        try:
            fd = open_fifo(path)
        except OSError as e:
            fatal("the host started no relay at %s: %s" % (path, e))
        self._raw(encode({"type": "detach", "seq": seq}))
        os.dup2(fd, self.fd, inheritable=False)
        os.close(fd)
        self.seq, self.used = seq, 0
        self._raw(encode({"type": "attached", "seq": seq}))

    def send_bytes(self, b):
        if forked() or self.fd is None:
            return
        with self.lock:
            if self.used + 4 + len(b) > self.budget - self.RESERVE:
                self._rotate()
            self._raw(b)

    def send(self, obj):
        self.send_bytes(fit(obj))


T = Transport()


MAIN_THREAD = threading.get_ident()


class Critical:
    """Holds a SIGINT that comes while the main thread writes a frame or
    reads the output pipes, and raises it as KeyboardInterrupt once done:
    a frame is never cut in the middle."""

    depth = 0
    pending = False

    def __enter__(self):
        if threading.get_ident() == MAIN_THREAD:
            Critical.depth += 1

    def __exit__(self, *exc):
        if threading.get_ident() != MAIN_THREAD:
            return False
        Critical.depth -= 1
        if Critical.depth == 0 and Critical.pending:
            Critical.pending = False
            if S.in_cell and exc[0] is None:
                raise KeyboardInterrupt
        return False


class Session:
    """What the current call is, its output budget, and the output read
    while no call runs (kept, within the budget, for the next call)."""

    def __init__(self):
        self.lock = threading.RLock()
        self.call = None
        self.used = 0
        self.sent = 0
        self.cut = False
        self.cut_data = False
        self.idle = []
        self.idle_used = 0
        self.idle_dropped = 0
        self.dec = {"stdout": codecs.getincrementaldecoder("utf-8")("replace"),
                    "stderr": codecs.getincrementaldecoder("utf-8")("replace")}
        self.fds = {_out_r: "stdout", _err_r: "stderr"}
        self.interrupted = False
        self.in_cell = False

    def begin(self, cid):
        with self.lock:
            self.call, self.used, self.sent, self.cut, self.interrupted = cid, 0, 0, False, False
            self.cut_data = False
            idle, self.idle, self.idle_used = self.idle, [], 0
            dropped, self.idle_dropped = self.idle_dropped, 0
            for obj in idle:
                self.emit(obj)
            if dropped:
                self.emit({"type": "stderr", "text": "[airlock: %d bytes printed between calls were left out]\n" % dropped})

    def finish(self, count):
        with self.lock:
            self.drain()
            self.emit({"type": "end", "execution_count": count})
            self.call = None

    def emit(self, obj):
        """Sends one event of the current call; between calls it is kept
        for the next one, within the output budget."""
        if forked():
            return
        if obj["type"] in ("result", "display") and not obj.get("data"):
            return
        with Critical(), self.lock:
            if self.call is None:
                n = len(obj.get("text", "")) + sum(len(v) for v in obj.get("data", {}).values())
                if self.idle_used + n > OUTPUT_LIMIT:
                    self.idle_dropped += n
                    return
                self.idle_used += n
                self.idle.append(obj)
                return
            obj["id"] = self.call
            b = fit(obj)
            if self.sent + len(b) > CALL_LIMIT - CALL_RESERVE[obj["type"]]:
                b = self.over_budget(obj, len(b))
                if b is None:
                    return
            self.sent += len(b) + 4
            T.send_bytes(b)

    def over_budget(self, obj, n):
        """What is sent instead of a frame over the call's budget: a note
        for a bundle, nothing for output (cut, as at the output limit), a
        short form of an error."""
        kind = obj["type"]
        if kind in ("result", "display"):
            if self.cut_data:
                return None
            self.cut_data = True
            note = "[airlock: a %s of %d bytes and what follows were left out: the call's events passed %d bytes]" % (kind, n, CALL_LIMIT)
            return fit({"type": kind, "id": obj["id"], "data": {"text/plain": note}})
        if kind == "error":
            return fit({"type": "error", "id": obj["id"], "name": clip(obj.get("name", ""), 256),
                        "value": clip(obj.get("value", ""), 1024), "traceback": []})
        if kind == "end":
            return fit(obj)
        self.cut = True
        return None

    def output(self, kind, text):
        if not text:
            return
        with self.lock:
            if self.call is not None:
                if self.cut:
                    return
                n = len(text.encode("utf-8", "surrogatepass"))
                if self.used + n > OUTPUT_LIMIT:
                    text = clip(text, max(0, OUTPUT_LIMIT - self.used))
                    text += "\n[airlock: output truncated at %d bytes]\n" % OUTPUT_LIMIT
                    self.cut = True
                self.used += n
            self.emit({"type": kind, "text": text})

    def read(self, fd, limit):
        """Reads up to limit bytes of one output pipe (nonblocking)."""
        try:
            b = os.read(fd, limit)
        except (BlockingIOError, InterruptedError):
            return 0
        if b:
            kind = self.fds[fd]
            self.output(kind, self.dec[kind].decode(b))
        return len(b)

    def drain(self):
        """Sends what the pipes hold now, so that output printed before an
        event comes before it. It reads only what is there already, so a
        process printing without end cannot hold it up."""
        if forked():
            return
        with Critical(), self.lock:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            for fd in (_out_r, _err_r):
                try:
                    n = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
                except OSError:
                    n = 0
                while n > 0:
                    got = self.read(fd, min(n, CHUNK))
                    if got <= 0:
                        break
                    n -= got

    def pump(self):
        """The output thread: forwards what the pipes get as it comes,
        at most one chunk per stream every 2 ms, so that output printed a
        byte at a time does not become a flood of events."""
        # The kernel may give a process's signal to any thread that does
        # not block it (when the main thread has a signal pending already,
        # say), and Python runs the handler in the main thread only when
        # that thread next runs Python code: a SIGINT taken by this thread
        # would leave the main thread asleep (in time.sleep) until the
        # grace restarts the context. Blocked here, it waits for the main
        # thread.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        p = select.poll()
        for fd in self.fds:
            p.register(fd, select.POLLIN)
        while True:
            try:
                ready = p.poll()
            except InterruptedError:
                continue
            for fd, _ in ready:
                with self.lock:
                    self.read(fd, CHUNK)
            time.sleep(0.002)

    def reinit_after_fork(self):
        self.lock = threading.RLock()
        T.lock = threading.Lock()


S = Session()
os.register_at_fork(after_in_child=S.reinit_after_fork)


# --- interrupts and what a call left running -----------------------------------


def proc_stat(pid):
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            s = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    # state, ppid, pgrp, session; starttime is field 22 of the line
    return rest[0], int(rest[1]), int(rest[3]), int(rest[19])


def cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return None


def session_procs():
    """The processes of this runner's session: pid → (ppid, starttime)."""
    sid = os.getsid(0)
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        st = proc_stat(name)
        if st and st[2] == sid:
            out[int(name)] = (st[1], st[3])
    return out


class Leftovers:
    """Kills what a call that was interrupted started: processes of this
    runner's session that were not there when the call began (a fork bomb,
    a runaway pipeline). Processes from earlier calls live on."""

    def __init__(self):
        self.before = {}
        self.keep = {MAIN_PID}

    def mark(self):
        self.before = session_procs()

    def new(self):
        now = session_procs()
        return {p for p, v in now.items()
                if p not in self.keep and self.before.get(p, (None, None))[1] != v[1]}

    def kill(self):
        """Stops every new process of the session (again and again, until a
        scan finds no more: they may be forking), kills them, reaps this
        runner's forked copies, and waits until they are gone: a zombie
        holds its pid, and the pids cap counts it."""
        killed = set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            stopped = set()
            for _ in range(200):
                fresh = self.new() - stopped - killed
                if not fresh:
                    break
                for p in fresh:
                    try:
                        os.kill(p, signal.SIGSTOP)
                    except OSError:
                        pass
                stopped |= fresh
            if not stopped:
                break
            mine = set()
            for p in stopped:
                st = proc_stat(p)
                # the code's subprocesses are left to the objects that wait
                # for them; init reaps orphans
                if st and st[1] == MAIN_PID and cmdline(p) == cmdline("self"):
                    mine.add(p)
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            killed |= stopped
            while time.monotonic() < deadline:
                for p in list(mine):
                    try:
                        if os.waitpid(p, os.WNOHANG)[0] == p:
                            mine.discard(p)
                    except ChildProcessError:
                        mine.discard(p)
                if not any(still_held(p, mine) for p in stopped):
                    break
                time.sleep(0.005)
        return len(killed)


def still_held(p, mine):
    """Whether p still holds its pid and will let it go soon: alive, or a
    zombie that this runner (a copy of it) or init reaps. A zombie child of
    the code's own Popen waits for its object."""
    st = proc_stat(p)
    if st is None:
        return False
    return not (st[0] == "Z" and st[1] == MAIN_PID and p not in mine)


L = Leftovers()


def on_sigint(signum, frame):
    S.interrupted = True
    if S.in_cell and LANGUAGE == "python":
        if Critical.depth:
            Critical.pending = True
            return
        raise KeyboardInterrupt
    if KERNEL is not None:
        KERNEL.interrupt()


# --- MIME bundles ------------------------------------------------------------

BINARY = ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf")
MIME_KEY = re.compile(r"[a-z][a-z0-9.+-]*/[a-z0-9][a-z0-9.+_-]*")


def b64(b):
    import base64
    return base64.b64encode(b).decode("ascii")


def normalize(data):
    """Turns a formatter's dict into MIME → string: bytes of binary types
    become base64, JSON values become JSON text."""
    out = {}
    for k, v in (data or {}).items():
        if not isinstance(k, str) or v is None or len(out) == 32:
            continue
        k = k.lower()
        if len(k) > 128 or not MIME_KEY.fullmatch(k):
            continue
        try:
            if isinstance(v, (bytes, bytearray)):
                v = b64(bytes(v)) if k in BINARY else bytes(v).decode("utf-8", "replace")
            elif k == "application/json" or k.endswith("+json"):
                v = v if isinstance(v, str) else json.dumps(v, default=str)
            elif not isinstance(v, str):
                v = str(v)
        except Exception:
            continue
        out[k] = v
    return out


def safe_str(e):
    try:
        return str(e)
    except Exception:
        return "<unprintable %s>" % type(e).__name__


# --- matplotlib ----------------------------------------------------------------

INLINE = "module://matplotlib_inline.backend_inline"
OWN = "module://_airlock_mpl"


def figure_png(fig):
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return b64(buf.getvalue())


def show_figures(*args, **kwargs):
    """Shows every open figure as a PNG display and closes them: the own
    backend's show(), and what runs after each cell."""
    mods = sys.modules
    if "matplotlib.pyplot" not in mods:
        return
    plt = mods["matplotlib.pyplot"]
    if plt.get_backend() != OWN:
        return
    from matplotlib._pylab_helpers import Gcf
    for m in Gcf.get_all_fig_managers():
        try:
            S.drain()
            S.emit({"type": "display", "data": {"image/png": figure_png(m.canvas.figure),
                                                "text/plain": "<%s>" % type(m.canvas.figure).__name__}})
        except Exception as e:
            S.output("stderr", "[airlock: a figure could not be drawn: %s]\n" % safe_str(e))
    plt.close("all")


class MplFinder:
    """Picks the backend when matplotlib is first imported: IPython's
    inline backend where it is there, else the runner's own (Agg, whose
    show() sends PNGs). A backend chosen in the environment other than
    Agg (the python image's default) is kept."""

    def __init__(self, backend):
        self.backend = backend

    def find_spec(self, name, path=None, target=None):
        if name == "_airlock_mpl":
            import importlib.util
            return importlib.util.spec_from_loader(name, OwnBackendLoader())
        if name != "matplotlib":
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, backend = spec.loader, self.backend

        class Wrap:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                chosen = os.environ.get("MPLBACKEND", "")
                if chosen.lower() in ("", "agg"):
                    module.rcParams["backend"] = backend

        spec.loader = Wrap()
        return spec


def install_mpl(backend):
    """Makes backend the one matplotlib starts with, unless the
    environment chose another than Agg."""
    sys.meta_path.insert(0, MplFinder(backend))
    mpl = sys.modules.get("matplotlib")
    if mpl is not None and "matplotlib.pyplot" not in sys.modules \
            and os.environ.get("MPLBACKEND", "").lower() in ("", "agg"):
        mpl.rcParams["backend"] = backend


class OwnBackendLoader:
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.backend_bases import FigureManagerBase
        module.FigureCanvas = FigureCanvasAgg
        module.FigureManager = FigureManagerBase
        module.show = show_figures
        module.backend_version = "airlock"


# --- the python kernels ---------------------------------------------------------


def rich(value):
    """A MIME bundle for value the way IPython's formatters make one,
    without IPython: repr, then the _repr_*_ methods the object has."""
    data = {"text/plain": clip(safe_repr(value), OUTPUT_LIMIT)}
    methods = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
               ("_repr_svg_", "image/svg+xml"), ("_repr_png_", "image/png"),
               ("_repr_jpeg_", "image/jpeg"), ("_repr_latex_", "text/latex"),
               ("_repr_json_", "application/json"))
    if not isinstance(value, type):
        mb = getattr(value, "_repr_mimebundle_", None)
        if callable(mb):
            try:
                r = mb()
                if isinstance(r, tuple):
                    r = r[0]
                if isinstance(r, dict):
                    data.update(normalize(r))
            except Exception:
                pass
        for meth, mime in methods:
            f = getattr(value, meth, None)
            if not callable(f) or mime in data:
                continue
            try:
                r = f()
            except Exception:
                continue
            if isinstance(r, tuple):
                r = r[0]
            if r is not None:
                data.update(normalize({mime: r}))
        plain_json(value, data)
        fig = sys.modules.get("matplotlib.figure")
        if fig is not None and isinstance(value, fig.Figure):
            try:
                data["image/png"] = figure_png(value)
            except Exception:
                pass
    return data


def plain_json(value, data):
    """Adds application/json to a bundle for a dict or list of plain JSON
    values (as the javascript kernel does for plain objects)."""
    if "application/json" in data or not isinstance(value, (dict, list)):
        return
    try:
        j = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return
    if len(j) <= OUTPUT_LIMIT:
        data["application/json"] = j


def safe_repr(v):
    try:
        return repr(v)
    except Exception as e:
        return "<%s object; repr failed: %s>" % (type(v).__name__, safe_str(e))


def display(*objs, **kwargs):
    """display() for the stdlib kernel, as IPython's: one display event
    per object (a dict with raw=True is taken as a MIME bundle)."""
    for o in objs:
        S.drain()
        data = normalize(o) if kwargs.get("raw") and isinstance(o, dict) else rich(o)
        S.emit({"type": "display", "data": data})


class PlainKernel:
    """The stdlib kernel: exec all but the last statement, eval the last
    when it is an expression, and show its value."""

    name = "stdlib"

    def __init__(self):
        import builtins
        import types
        # a __main__ of the code's own: the runner's globals stay apart
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        self.ns = main.__dict__
        builtins.display = display
        self.count = 0
        self.loop = None
        install_mpl(OWN)

    def _run(self, code_obj):
        r = eval(code_obj, self.ns)
        if code_obj.co_flags & 0x80:  # CO_COROUTINE: top-level await
            if self.loop is None:
                import asyncio
                self.loop = asyncio.new_event_loop()
            r = self.loop.run_until_complete(r)
        return r

    def run(self, code, silent):
        import ast
        import linecache
        if not silent:
            self.count += 1
        filename = "<cell-%d>" % self.count if not silent else "<preload>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not silent \
                    and not code.rstrip().endswith(";"):
                last = tree.body.pop()
            S.in_cell = True
            try:
                self._run(compile(tree, filename, "exec", flags=flags, dont_inherit=True))
                if last is not None:
                    expr = ast.Expression(last.value)
                    value = self._run(compile(expr, filename, "eval", flags=flags, dont_inherit=True))
                    if value is not None:
                        self.ns["_"] = value
                        S.in_cell = False
                        S.drain()
                        S.emit({"type": "result", "data": rich(value)})
            finally:
                S.in_cell = False
        except BaseException as e:  # noqa: B036 — a cell's KeyboardInterrupt and SystemExit are errors too
            S.in_cell = False
            report(e)
        try:
            show_figures()
        except BaseException as e:
            report(e)
        return self.count if not silent else 0


def trim_tb(tb):
    """Drops the runner's frames from a traceback: those above the cell,
    and the SIGINT handler's frame below it."""
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    t = tb
    while t is not None and t.tb_next is not None:
        if t.tb_next.tb_frame.f_code is on_sigint.__code__:
            t.tb_next = None
            break
        t = t.tb_next
    return tb


def report(e):
    import traceback
    tb = trim_tb(e.__traceback__)
    if isinstance(e, SyntaxError):
        lines = traceback.format_exception_only(type(e), e)
    else:
        lines = traceback.format_exception(type(e), e, tb)
    S.drain()
    S.emit({"type": "error", "name": type(e).__name__, "value": safe_str(e),
            "traceback": [x.rstrip("\n") for x in lines]})


class IPythonKernel:
    """IPython's InteractiveShell with its display formatters, the way a
    notebook kernel runs it: results and displays become MIME bundles,
    tracebacks become error events, and figures go through the inline
    backend of matplotlib-inline where it is there."""

    def __init__(self):
        # IPython's completer imports jedi when it can (some 5 MiB and 50 ms);
        # nothing completes here. The code may import jedi later.
        blocked = "jedi" not in sys.modules
        if blocked:
            sys.modules["jedi"] = None
        try:
            self._init()
        finally:
            if blocked and "jedi" in sys.modules and sys.modules["jedi"] is None:
                del sys.modules["jedi"]

    def _init(self):
        import IPython
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        class Hook(DisplayHook):
            def write_output_prompt(self):
                pass

            def compute_format_data(self, result):
                data, md = super().compute_format_data(result)
                plain_json(result, data)
                return data, md

            def write_format_data(self, format_dict, md_dict=None):
                S.drain()
                S.emit({"type": "result", "data": normalize(format_dict)})

            def finish_displayhook(self):
                pass

        class Pub(DisplayPublisher):
            def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
                S.drain()
                S.emit({"type": "display", "data": normalize(data)})

            def clear_output(self, wait=False):
                pass

        class Shell(InteractiveShell):
            displayhook_class = Hook
            display_pub_class = Pub

            def _showtraceback(self, etype, evalue, stb):
                S.drain()
                if isinstance(stb, str):
                    stb = [stb]
                S.emit({"type": "error", "name": getattr(etype, "__name__", str(etype)),
                        "value": safe_str(evalue), "traceback": [str(x) for x in stb]})

            def showtraceback(self, *args, **kwargs):
                # An interrupted call has the host's grace period to end.
                # The context traceback imports stack_data and parses the
                # module of every frame: 0.2 s on the first error in
                # library code natively, seconds in a machine under TCG,
                # enough to run past the grace and lose the context. The
                # plain one reads one line per frame.
                tb = self.InteractiveTB
                if not S.interrupted or tb.mode not in ("Context", "Verbose"):
                    return super().showtraceback(*args, **kwargs)
                mode = tb.mode
                tb.set_mode("Plain")
                try:
                    return super().showtraceback(*args, **kwargs)
                finally:
                    tb.set_mode(mode)

            def show_usage_error(self, exc):
                S.emit({"type": "error", "name": "UsageError", "value": safe_str(exc), "traceback": []})

            def init_virtualenv(self):
                pass

            def _get_exc_info(self, exc_tuple=None):
                etype, value, tb = super()._get_exc_info(exc_tuple)
                t = tb
                while t is not None and t.tb_next is not None:
                    if t.tb_next.tb_frame.f_code is on_sigint.__code__:
                        t.tb_next = None
                        break
                    t = t.tb_next
                return etype, value, tb

            def enable_gui(self, gui=None):
                pass

        cfg = Config()
        cfg.HistoryManager.enabled = False
        cfg.InteractiveShell.colors = "NoColor"
        cfg.InteractiveShell.autocall = 0
        self.shell = Shell.instance(config=cfg)
        import importlib.util
        # whether it is there, without importing it (that imports matplotlib)
        if importlib.util.find_spec("matplotlib_inline") is not None:
            backend = INLINE
        else:
            backend = OWN
            self.shell.events.register("post_execute", show_figures)
        install_mpl(backend)
        self.name = "ipython " + IPython.__version__
        if backend == INLINE:
            self.name += " (matplotlib-inline)"

    def run(self, code, silent):
        S.in_cell = True
        try:
            r = self.shell.run_cell(code, store_history=not silent, silent=silent)
        except BaseException as e:
            S.in_cell = False
            report(e)
            return 0 if silent else self.shell.execution_count - 1
        finally:
            S.in_cell = False
        return 0 if silent else (r.execution_count or 0)


# --- supervised kernels: bash and node -------------------------------------------


def spawn(argv, pass_fds, env=None):
    import subprocess
    kw = {}
    if sys.version_info >= (3, 11):
        kw["process_group"] = 0
    else:
        kw["preexec_fn"] = os.setpgrp
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=pass_fds, env=env, **kw)


class BashKernel:
    """A persistent interactive bash (no readline, no history, no
    prompts): variables, functions, aliases and the working folder persist.
    Each call is eval'd at the top level; bash writes the call's token and
    exit status to a status pipe. SIGINT goes to bash's process group, as a
    terminal's Ctrl-C does: the call's foreground commands stop and bash
    drops the rest of the call."""

    def __init__(self):
        self.cmd_r, self.cmd_w = os.pipe()
        self.st_r, self.st_w = os.pipe()
        env = dict(os.environ, PS1="", PS2="", PS0="", PS4="+ ")
        env.pop("PROMPT_COMMAND", None)
        env.pop("BASH_ENV", None)
        env.pop("ENV", None)
        import subprocess
        kw = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        self.p = subprocess.Popen(["bash", "--noprofile", "--norc", "--noediting", "-i"],
                                  stdin=self.cmd_r, pass_fds=(self.st_w,), env=env, **kw)
        os.close(self.cmd_r)
        os.close(self.st_w)
        L.keep.add(self.p.pid)
        self.buf = b""
        self.token = None
        self.int_pending = False
        self.count = 0
        self.send("set +o history +H; unset HISTFILE PROMPT_COMMAND; PS1=; PS2=; PS0=\n"
                  "__airlock_fd=%d; readonly __airlock_fd\n"
                  "__airlock_done() { printf '%%s %%s\\n' \"$1\" \"$2\" >&\"$__airlock_fd\"; }\n"
                  "readonly -f __airlock_done\n"
                  "__airlock_done hello \"$BASH_VERSION\"\n" % self.st_w)
        version = self.wait_for("hello", 30.0)
        if version is None:
            fatal("bash did not start")
        self.name = "bash " + version.split("(")[0]
        S.drain()
        # what bash says when it starts without a terminal is not the first call's
        with S.lock:
            S.idle, S.idle_used = [], 0

    def send(self, s):
        write_all(self.cmd_w, s.encode("utf-8", "surrogateescape"))

    def wait_for(self, token, timeout=None):
        """Reads status lines until one with token comes; None when bash
        ended (or the timeout passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.int_pending and self.token:
                self.int_pending = False
                self.send("__airlock_done %s 130\n" % self.token)
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                tok, _, rest = line.decode("utf-8", "replace").partition(" ")
                if tok == token:
                    return rest
            if self.p.poll() is not None:
                return None
            if deadline is not None and time.monotonic() > deadline:
                return None
            try:
                r, _, _ = select.select([self.st_r], [], [], 0.05)
            except InterruptedError:
                continue
            if r:
                b = os.read(self.st_r, 4096)
                if not b:
                    # every writer closed; only bash's end is left to see
                    self.p.wait()
                    return None
                self.buf = (self.buf + b)[-(1 << 20):]

    def run(self, code, silent):
        if not silent:
            self.count += 1
        self.int_pending = False
        self.token = "t" + os.urandom(8).hex()
        if "\0" in code:
            S.emit({"type": "error", "name": "ValueError", "value": "bash code cannot hold NUL bytes", "traceback": []})
            return self.count
        quoted = "'" + code.replace("'", "'\\''") + "'"
        self.send("__airlock_c=%s; eval \"$__airlock_c\" </dev/null; __airlock_done %s $?\n" % (quoted, self.token))
        status = self.wait_for(self.token)
        if status is None:
            self.died()
        S.drain()
        try:
            code_ = int(status)
        except ValueError:
            code_ = 1
        if code_ != 0:
            S.emit({"type": "error", "name": "ExitCode", "value": str(code_), "traceback": []})
        return self.count if not silent else 0

    def interrupt(self):
        try:
            os.killpg(self.p.pid, signal.SIGINT)
        except OSError:
            pass
        # bash drops the rest of the interrupted line, its status report
        # with it: wait_for sends one that stands in (a late duplicate is
        # ignored). Not from here: the handler may have cut into a send.
        self.int_pending = True

    def died(self):
        rc = self.p.wait()
        S.drain()
        why = "bash exited with status %d" % rc if rc >= 0 else "bash was killed by signal %d" % -rc
        fatal_frame(why)


class NodeKernel:
    """A node process running kernel.js: a persistent vm context, top-level
    await through node's own REPL rewriting, and util.inspect for values.
    It reports on a pipe of its own; this runner forwards."""

    def __init__(self):
        self.req_r, self.req_w = os.pipe()
        self.msg_r, self.msg_w = os.pipe()
        argv = ["node", "--expose-internals", "-e", CFG["kernel_js"], "airlock-interp-node",
                json.dumps({"req": self.req_r, "msg": self.msg_w, "frame_limit": FRAME_LIMIT, "output_limit": OUTPUT_LIMIT})]
        self.p = spawn(argv, (self.req_r, self.msg_w))
        os.close(self.req_r)
        os.close(self.msg_w)
        L.keep.add(self.p.pid)
        self.buf = b""
        self.count = 0
        hello = self.next_message(30.0)
        if not hello or hello.get("type") != "hello":
            fatal("node did not start")
        self.name = "node " + str(hello.get("version", "?"))

    def next_message(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if n > FRAME_LIMIT:
                    self.died("the node kernel sent a frame over the limit")
                if len(self.buf) >= 4 + n:
                    b, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    try:
                        m = json.loads(b.decode("utf-8", "replace"))
                    except ValueError:
                        m = None
                    if not isinstance(m, dict):
                        self.died("the node kernel sent a frame that is not a JSON object")
                    return m
            if deadline is not None and time.monotonic() > deadline:
                return None
            try:
                r, _, _ = select.select([self.msg_r], [], [], 0.05)
            except InterruptedError:
                continue
            if r:
                b = os.read(self.msg_r, 1 << 20)
                if not b:
                    return None
                self.buf += b
            elif self.p.poll() is not None:
                return None

    def run(self, code, silent):
        if not silent:
            self.count += 1
        b = encode({"code": code, "count": self.count, "silent": bool(silent)})
        write_all(self.req_w, struct.pack(">I", len(b)) + b)
        while True:
            m = self.next_message()
            if m is None:
                self.died()
            t = m.get("type")
            if t == "end":
                return self.count if not silent else 0
            S.drain()
            if t in ("result", "display") and isinstance(m.get("data"), dict):
                S.emit({"type": t, "data": normalize(m["data"])})
            elif t == "error":
                tb = m.get("traceback")
                S.emit({"type": "error", "name": str(m.get("name", "Error")), "value": str(m.get("value", "")),
                        "traceback": [str(x) for x in tb] if isinstance(tb, list) else []})

    def interrupt(self):
        try:
            os.kill(self.p.pid, signal.SIGINT)
        except OSError:
            pass

    def died(self, why=None):
        if why is not None:
            self.p.kill()
        rc = self.p.wait()
        S.drain()
        if why is None:
            why = "node exited with status %d" % rc if rc >= 0 else "node was killed by signal %d" % -rc
        fatal_frame(why)


def fatal_frame(why):
    """Tells the host that the kernel ended and why, and ends the runner."""
    obj = {"type": "fatal", "reason": why}
    if S.call is not None:
        obj["id"] = S.call
    T.send(obj)
    os._exit(0)


# --- the main loop -------------------------------------------------------------

KERNEL = None


def make_kernel():
    if LANGUAGE == "bash":
        return BashKernel()
    if LANGUAGE == "javascript":
        return NodeKernel()
    if CFG.get("runner") != "stdlib":
        try:
            return IPythonKernel()
        except ImportError:
            pass
    return PlainKernel()


def main():
    global KERNEL
    signal.signal(signal.SIGINT, on_sigint)
    try:
        T.open()
    except OSError as e:
        fatal("cannot open the transport: %s" % e)
    threading.Thread(target=S.pump, daemon=True).start()
    KERNEL = make_kernel()
    T.send({"type": "ready", "runner": KERNEL.name, "language": LANGUAGE,
            "version": sys.version.split()[0], "pid": os.getpid()})
    while True:
        try:
            req = read_request()
        except KeyboardInterrupt:
            continue
        except ValueError as e:
            fatal("bad request: %s" % e)
        if req is None:
            os._exit(0)
        op = req.get("op")
        if op != "run":
            fatal("unknown request %r" % op)
        S.begin(req["id"])
        L.mark()
        if LANGUAGE == "python":
            signal.signal(signal.SIGINT, on_sigint)
        count = 0
        try:
            count = KERNEL.run(req["code"], bool(req.get("silent")))
        except KeyboardInterrupt:
            S.interrupted = True
        if forked():
            os._exit(0)
        if S.interrupted:
            n = L.kill()
            if n:
                S.output("stderr", "[airlock: the interrupted call left %d processes running; they were killed]\n" % n)
        S.finish(count)


main()
