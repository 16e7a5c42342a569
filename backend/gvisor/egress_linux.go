package gvisor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Egress under gVisor. The sandbox's network stack is gVisor's own, out of
// the host's reach, so the proxy's socket cannot be placed in it as the
// other backends do. Instead the proxy listens on a unix socket in the
// sandbox's folder, which is bound read-only at /run inside; runsc's
// --host-uds=open lets the sandbox connect to host sockets bound into it
// (and to no other). A forwarder inside, running as the keeper's user so
// that commands cannot signal it, listens on 127.0.0.1:3128 and relays
// each connection to that socket. The forwarder is python3, which the
// image must have.
const (
	egressHost   = "127.0.0.1"
	egressPort   = 3128
	egressMount  = "/run"
	egressSocket = "egress.sock"
)

// forwarderScript relays TCP connections on HOST:PORT to the unix socket
// PATH (argv 1-3), at most 256 at a time; it prints "ready" once
// listening.
const forwarderScript = `import socket, sys, threading
path, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
slots = threading.BoundedSemaphore(256)
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, port))
srv.listen(64)
print("ready", flush=True)
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(c):
    try:
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            u.connect(path)
        except OSError:
            return
        t = threading.Thread(target=pump, args=(u, c), daemon=True)
        t.start()
        pump(c, u)
        t.join()
        u.close()
    finally:
        c.close()
        slots.release()
while True:
    c, _ = srv.accept()
    if not slots.acquire(blocking=False):
        c.close()
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// egressBridge is the host side of a sandbox's egress: the folder that
// holds the proxy's socket, and the forwarder inside.
type egressBridge struct {
	dir       string
	forwarder chan struct{} // closed when the forwarder's runsc exec ended
	cmd       *exec.Cmd
}

// newEgressBridge makes the folder that holds the proxy's socket.
func newEgressBridge(sandboxDir string) (*egressBridge, error) {
	dir := filepath.Join(sandboxDir, "egress")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	return &egressBridge{dir: dir}, nil
}

// bind is the folder's bind into the sandbox.
func (e *egressBridge) bind() hostdir.Bind {
	return hostdir.Bind{Source: e.dir, Target: egressMount, ReadOnly: true}
}

// listen opens the proxy's socket. Connecting needs write permission on
// it; its folder is reachable only through the sandbox's bind.
func (e *egressBridge) listen() (net.Listener, error) {
	sock := filepath.Join(e.dir, egressSocket)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	return l, nil
}

// egressEnv is what processes get to reach the forwarder.
func egressEnv() map[string]string {
	return egress.Env(net.JoinHostPort(egressHost, strconv.Itoa(egressPort)))
}

// startForwarder starts the forwarder inside as the keeper's user, and
// waits until it listens: its first line must be exactly "ready".
func (e *egressBridge) startForwarder(ctx context.Context, i *instance) error {
	args := append(slices.Clone(i.flags), "exec", "--user", fmt.Sprintf("%d:%d", keeperUID, keeperUID), "--cwd", "/", i.cid,
		"python3", "-c", forwarderScript, egressMount+"/"+egressSocket, egressHost, strconv.Itoa(egressPort))
	cmd := exec.Command(i.backend.probe().runsc, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("egress forwarder: %w", err)
	}
	e.cmd = cmd
	e.forwarder = make(chan struct{})
	ready := make(chan bool, 1)
	i.sb.Go(func() {
		line, _ := bufio.NewReader(io.LimitReader(out, 64)).ReadString('\n')
		ready <- line == "ready\n"
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(e.forwarder)
	})
	select {
	case ok := <-ready:
		if ok {
			return nil
		}
		<-e.forwarder
		return fmt.Errorf("egress forwarder (python3 in the image) did not start: %s: %w", strings.TrimSpace(stderr.String()), sandbox.ErrUnsupported)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(forwarderWait):
		return fmt.Errorf("egress forwarder did not listen within %v", forwarderWait)
	}
}

// close waits for the forwarder's runsc exec to end (the sandbox is
// being deleted).
func (e *egressBridge) close(ctx context.Context) error {
	if e.forwarder == nil {
		return nil
	}
	select {
	case <-e.forwarder:
		return nil
	case <-ctx.Done():
		_ = e.cmd.Process.Kill()
		return fmt.Errorf("egress forwarder: %w", ctx.Err())
	}
}

// forwarderWait bounds the forwarder's start.
const forwarderWait = 30 * time.Second

// limitedWriter keeps at most n bytes.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}
