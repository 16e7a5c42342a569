package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/kubernetes/agent"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// ListenEgress starts the agent's egress listener inside the sandbox and
// returns a listener whose connections are those the code opens to
// sandbox.EgressAddr: each one travels over an exec stream of its own
// ("egress-conn"), never over the Pod's network, which has none.
func (i *instance) ListenEgress(ctx context.Context) (net.Listener, error) {
	if !i.policy.Network.Enabled() {
		return nil, fmt.Errorf("sandbox %s has no egress rules: %w", i.id, sandbox.ErrInvalid)
	}
	if err := i.alive(); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &egressListener{i: i, cancel: cancel, conns: make(chan net.Conn), closed: make(chan struct{})}
	pr, pw := io.Pipe()
	inR, inW := io.Pipe() // held open: its end tells the listener that this process is gone
	l.hold = inW
	ready := make(chan error, 1)
	go func() {
		err := i.b.execStream(lctx, i.pod, sandboxContainer, []string{AgentPath, agent.CmdEgress}, inR, pw, io.Discard)
		pw.CloseWithError(streamEnd(err))
		select {
		case ready <- fmt.Errorf("the egress listener ended: %v", err):
		default:
		}
		l.Close()
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if first {
				first = false
				if line == "listening" {
					ready <- nil
					continue
				}
			}
			id, ok := strings.CutPrefix(line, "conn ")
			if !ok {
				continue
			}
			go l.take(lctx, id)
		}
		pr.Close()
	}()
	select {
	case err := <-ready:
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("sandbox %s: %w", i.id, err)
		}
	case <-ctx.Done():
		l.Close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		l.Close()
		return nil, fmt.Errorf("sandbox %s: the egress listener did not start", i.id)
	}
	go func() {
		select {
		case <-i.done:
			l.Close()
		case <-l.closed:
		}
	}()
	return l, nil
}

// egressListener hands out the connections of a sandbox's egress.
type egressListener struct {
	i      *instance
	cancel context.CancelFunc
	hold   *io.PipeWriter
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// take opens the exec that carries announced connection id and hands its
// host end to Accept.
func (l *egressListener) take(ctx context.Context, id string) {
	host, inside := net.Pipe()
	go func() {
		_ = l.i.b.execStream(ctx, l.i.pod, sandboxContainer, []string{AgentPath, agent.CmdEgressConn, id},
			inside, inside, io.Discard)
		inside.Close()
	}()
	select {
	case l.conns <- host:
	case <-l.closed:
		host.Close()
	}
}

func (l *egressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *egressListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.hold.Close()
		l.cancel()
	})
	return nil
}

func (l *egressListener) Addr() net.Addr { return egressAddr{} }

// egressAddr is where the code reaches the proxy.
type egressAddr struct{}

func (egressAddr) Network() string { return "tcp" }
func (egressAddr) String() string  { return sandbox.EgressAddr }
