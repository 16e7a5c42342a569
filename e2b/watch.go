package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	fspb "github.com/airlock-sandbox/airlock/e2b/internal/envdpb/filesystem"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// watcherScript watches a folder with inotify from inside the sandbox, as
// the sandbox's user and within its inotify budget, and prints one JSON
// line per event ({"op","name","dir"}), after {"ready":true} once every
// watch is in place. With "1" as its second argument it watches the
// folders below too, and the ones made later.
const watcherScript = `
import ctypes, json, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_Q_OVERFLOW, IN_ISDIR = 0x400, 0x4000, 0x40000000
MASK = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
root, recursive = sys.argv[1], sys.argv[2] == "1"
fd = libc.inotify_init1(os.O_CLOEXEC)
if fd < 0:
    sys.exit("inotify_init1: " + os.strerror(ctypes.get_errno()))
wds = {}
def add(p, top=False):
    wd = libc.inotify_add_watch(fd, p.encode(), MASK)
    if wd < 0:
        if top:
            sys.exit("inotify_add_watch %s: %s" % (p, os.strerror(ctypes.get_errno())))
        return
    wds[wd] = p
    if recursive:
        try:
            for e in os.scandir(p):
                if e.is_dir(follow_symlinks=False):
                    add(e.path)
        except OSError:
            pass
def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()
add(root, True)
say(ready=True)
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        wd, m, _, n = struct.unpack_from("iIII", buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b"\0").decode("utf-8", "replace")
        i += 16 + n
        if m & IN_Q_OVERFLOW:
            say(op="overflow", name="", dir=False)
            continue
        base = wds.get(wd)
        if base is None:
            continue
        if m & IN_DELETE_SELF:
            if base == root:
                say(op="remove", name="", dir=True)
                sys.exit(0)
            continue
        full = os.path.join(base, name)
        rel = os.path.relpath(full, root)
        isdir = bool(m & IN_ISDIR)
        for bit, op in ((IN_CREATE, "create"), (IN_MOVED_TO, "create"), (IN_MODIFY, "write"),
                        (IN_DELETE, "remove"), (IN_MOVED_FROM, "rename"), (IN_ATTRIB, "chmod")):
            if m & bit:
                say(op=op, name=rel, dir=isdir)
        if recursive and isdir and m & (IN_CREATE | IN_MOVED_TO):
            add(full)
`

// watchEvent is one line of the watcher.
type watchEvent struct {
	Ready bool   `json:"ready"`
	Op    string `json:"op"`
	Name  string `json:"name"`
	Dir   bool   `json:"dir"`
}

var watchOps = map[string]fspb.EventType{
	"create": fspb.EventType_EVENT_TYPE_CREATE,
	"write":  fspb.EventType_EVENT_TYPE_WRITE,
	"remove": fspb.EventType_EVENT_TYPE_REMOVE,
	"rename": fspb.EventType_EVENT_TYPE_RENAME,
	"chmod":  fspb.EventType_EVENT_TYPE_CHMOD,
}

// lineWriter collects a process's output and hands on whole lines.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan []byte
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(nil), l.buf[:i]...)
		l.buf = l.buf[i+1:]
		select {
		case l.lines <- line:
		default: // a reader that does not keep up loses events, as inotify's queue would
		}
	}
	if len(l.buf) > 1<<16 {
		l.buf = nil
	}
	return len(b), nil
}

// WatchDir streams the events of a folder: a watcher process runs in the
// sandbox, as its user, for as long as the stream lasts.
func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	s, err := current(ctx)
	if err != nil {
		return rpcError(err)
	}
	if err := userOf(req.Header(), ""); err != nil {
		return err
	}
	dir := resolve(req.Msg.GetPath())
	fi, err := s.Files().Stat(ctx, dir)
	if err != nil {
		return rpcError(err)
	}
	if !fi.IsDir() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a folder", dir))
	}
	recursive := "0"
	if req.Msg.GetRecursive() {
		recursive = "1"
	}
	out := &lineWriter{lines: make(chan []byte, 4096)}
	errs := &syncWriter{}
	p, err := s.Start(ctx, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", watcherScript, dir, recursive},
		Stdout: out, Stderr: errs, Timeout: sandbox.Duration(commandTimeout(ctx, s)), KeepAlive: true})
	if err != nil {
		return rpcError(err)
	}
	f.h.procs.table(s).hide(p.ID)
	defer func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		_ = p.Signal(kctx, syscall.SIGKILL)
		_, _ = p.Wait(kctx)
	}()
	ended := make(chan struct{})
	go func() {
		_, _ = p.Wait(ctx)
		close(ended)
	}()
	var tick <-chan time.Time
	if ka := keepaliveOf(req.Header()); ka > 0 {
		t := time.NewTicker(ka)
		defer t.Stop()
		tick = t.C
	}
	started := false
	for {
		select {
		case line := <-out.lines:
			var ev watchEvent
			if json.Unmarshal(line, &ev) != nil {
				continue
			}
			if ev.Ready {
				started = true
				if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
					return err
				}
				continue
			}
			if ev.Op == "overflow" {
				return connect.NewError(connect.CodeResourceExhausted, errors.New("the watch lost events: more came than it could queue"))
			}
			typ, ok := watchOps[ev.Op]
			if !ok {
				continue
			}
			fe := &fspb.FilesystemEvent{Name: ev.Name, Type: typ}
			if req.Msg.GetIncludeEntry() && ev.Op != "remove" && ev.Op != "rename" {
				p := path.Join(dir, ev.Name)
				if fi, err := s.Files().Stat(ctx, p); err == nil {
					fe.Entry = entryOf(p, fi)
				}
			}
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
				return err
			}
		case <-tick:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ended:
			if !started {
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the folder watch did not start: %s", errs.String()))
			}
			return nil
		case <-ctx.Done():
			return rpcError(ctx.Err())
		}
	}
}

// syncWriter keeps the first 4 KiB written to it, for an error message.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 4096 {
		s.b.Write(b)
	}
	return len(b), nil
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(bytes.TrimSpace(s.b.Bytes()))
}
