package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// instance is one microvm sandbox, seen from the host.
type instance struct {
	id       string
	b        *Backend
	policy   sandbox.Policy
	imageEnv map[string]string
	weakened []string          // the host's weaker layers, then the guest's
	details  map[string]string // Result.BackendDetails

	m       *machine
	conn    *wire.Conn
	hello   chan *wire.Hello
	egressQ chan net.Conn // egress connections waiting for the listener
	seq     atomic.Uint64

	mu        sync.Mutex
	pending   map[uint64]chan wire.Msg
	procs     map[uint64]*process
	gone      error // set once the sandbox cannot take requests
	egressOut bool  // the listener was handed out
	done      chan struct{}
	err       error

	running  sync.WaitGroup // processes whose Result is still being made
	killOnce sync.Once
	killErr  error
}

var (
	_ sandbox.Instance        = (*instance)(nil)
	_ sandbox.OutputArchiver  = (*instance)(nil)
	_ sandbox.NetworkAttacher = (*instance)(nil)
)

// maxPendingEgress bounds the egress connections the guest may open
// before the host's listener takes them; more are refused.
const maxPendingEgress = 64

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// Done is closed when the sandbox has ended.
func (i *instance) Done() <-chan struct{} { return i.done }

// Err says why the sandbox ended.
func (i *instance) Err() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.err
}

// boot starts the machine, waits for its agent, and makes the sandbox
// inside.
func (i *instance) boot(ctx context.Context, ms machineSpec, h *hostInfo) error {
	ctx, cancel := context.WithTimeout(ctx, i.b.opts.BootTimeout)
	defer cancel()
	var cg *native.HostCgroup
	if h.cgroupErr == nil {
		var err error
		cg, err = i.b.cgroups.NewHostCgroup(native.HostLimits{MemoryBytes: ms.qemuMemory, CPUs: float64(ms.cpus) + 0.25, Pids: 64 + 2*ms.cpus})
		if err != nil {
			return err
		}
	}
	m, err := startMachine(ctx, ms, cg)
	if err != nil {
		if cg != nil {
			_ = cg.Remove()
		}
		return err
	}
	i.m = m
	i.conn = wire.NewConn(m.conn, wire.Host, i.control)
	go i.watch()
	var hello *wire.Hello
	select {
	case hello = <-i.hello:
	case <-i.conn.Done():
		return fmt.Errorf("%w: %v%s", errBoot, i.conn.Err(), i.consoleTail())
	case <-ctx.Done():
		return fmt.Errorf("%w: no word from the guest within %v%s", errBoot, i.b.opts.BootTimeout, i.consoleTail())
	}
	i.details["guest_kernel"] = hello.Kernel
	seed := make([]byte, 64)
	if _, err := io.ReadFull(randReader, seed); err != nil {
		return err
	}
	r, err := i.request(ctx, wire.Msg{Op: wire.OpCreate, Create: &wire.Create{ID: i.id, Policy: i.policy, ImageEnv: i.imageEnv,
		UnixNano: time.Now().UnixNano(), Seed: seed}})
	if err == nil && r.Error != "" {
		err = wire.Errorf(r.Error, r.Kind)
	}
	if err != nil {
		return fmt.Errorf("the sandbox inside the machine: %w%s", err, i.consoleTail())
	}
	if r.Ready != nil {
		for _, w := range r.Ready.Weakened {
			i.weakened = append(i.weakened, "guest: "+w)
		}
	}
	return nil
}

// consoleTail is the end of the guest's console, for error messages.
func (i *instance) consoleTail() string {
	if i.m == nil {
		return ""
	}
	s := strings.TrimSpace(i.m.console.String())
	if s == "" {
		return ""
	}
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return "\nguest console:\n" + s
}

// watch ends the sandbox when QEMU exits or the connection fails, which
// is a death unless Destroy caused it.
func (i *instance) watch() {
	var why error
	select {
	case <-i.m.dead:
		why = fmt.Errorf("sandbox %s: the machine exited: %w", i.id, sandbox.ErrDied)
	case <-i.conn.Done():
		why = fmt.Errorf("sandbox %s: the guest's channel failed: %v: %w", i.id, i.conn.Err(), sandbox.ErrDied)
	}
	i.fail(why)
}

// fail marks the sandbox unusable with err, wakes every waiter, and, for
// a death, ends it: a broken or hostile guest is killed as a whole.
func (i *instance) fail(err error) {
	i.mu.Lock()
	if i.gone != nil {
		i.mu.Unlock()
		return
	}
	i.gone = err
	for id, c := range i.pending {
		close(c)
		delete(i.pending, id)
	}
	procs := i.procs
	i.procs = map[uint64]*process{}
	i.mu.Unlock()
	for _, p := range procs {
		p.ended(nil)
	}
	if errors.Is(err, sandbox.ErrDied) {
		i.b.opts.Logger.Warn("sandbox died", "id", i.id, "err", err)
		go func() { _ = i.kill(err) }()
	}
}

// control takes one message from the guest; it runs on the connection's
// reading goroutine and never blocks. Anything unexpected from the guest
// ends the sandbox.
func (i *instance) control(b []byte) error {
	m, err := wire.Decode(b)
	if err != nil {
		return err
	}
	switch m.Op {
	case wire.OpHello:
		if m.Hello == nil {
			return fmt.Errorf("hello without a body: %w", wire.ErrProtocol)
		}
		select {
		case i.hello <- m.Hello:
		default:
			return fmt.Errorf("a second hello: %w", wire.ErrProtocol)
		}
	case wire.OpReply:
		i.mu.Lock()
		c := i.pending[m.ID]
		delete(i.pending, m.ID)
		i.mu.Unlock()
		if c != nil {
			c <- m
		}
	case wire.OpExit:
		if m.Exit == nil {
			return fmt.Errorf("exit without a body: %w", wire.ErrProtocol)
		}
		i.mu.Lock()
		p := i.procs[m.Exit.Proc]
		delete(i.procs, m.Exit.Proc)
		i.mu.Unlock()
		if p != nil {
			p.ended(m.Exit)
		}
	case wire.OpEgress:
		st, err := i.conn.Accept(m.Egress)
		if err != nil {
			return err
		}
		select {
		case i.egressQ <- streamConn{st}:
		default:
			st.Close() // nobody takes them: refused
		}
	case wire.OpGone:
		go i.fail(fmt.Errorf("sandbox %s: inside the machine: %s: %w", i.id, m.Error, sandbox.ErrDied))
	default:
		return fmt.Errorf("unexpected %q from the guest: %w", m.Op, wire.ErrProtocol)
	}
	return nil
}

// request sends m with a fresh id and waits for the guest's reply. An
// error reply is returned as the reply, not as an error.
func (i *instance) request(ctx context.Context, m wire.Msg) (wire.Msg, error) {
	p, err := i.send(m)
	if err != nil {
		return wire.Msg{}, err
	}
	return p.wait(ctx)
}

// pendingReply is a request sent, whose reply is still to come.
type pendingReply struct {
	i  *instance
	id uint64
	c  chan wire.Msg
}

// send sends m with a fresh id and returns at once, so that the caller
// may feed a stream the request names (which the guest takes only once
// it has read the request) before it waits for the reply.
func (i *instance) send(m wire.Msg) (*pendingReply, error) {
	m.ID = i.seq.Add(1)
	p := &pendingReply{i: i, id: m.ID, c: make(chan wire.Msg, 1)}
	i.mu.Lock()
	if i.gone != nil {
		i.mu.Unlock()
		return nil, i.gone
	}
	i.pending[m.ID] = p.c
	i.mu.Unlock()
	if err := i.conn.SendMsg(m); err != nil {
		p.drop()
		return nil, i.goneOr(err)
	}
	return p, nil
}

func (p *pendingReply) drop() {
	p.i.mu.Lock()
	delete(p.i.pending, p.id)
	p.i.mu.Unlock()
}

// wait waits for the reply.
func (p *pendingReply) wait(ctx context.Context) (wire.Msg, error) {
	select {
	case r, ok := <-p.c:
		if !ok {
			return wire.Msg{}, p.i.goneOr(sandbox.ErrDestroyed)
		}
		return r, nil
	case <-ctx.Done():
		p.drop()
		return wire.Msg{}, ctx.Err()
	}
}

// call is request with the reply's error as the error.
func (i *instance) call(ctx context.Context, m wire.Msg) (wire.Msg, error) {
	r, err := i.request(ctx, m)
	if err == nil && r.Error != "" {
		err = wire.Errorf(r.Error, r.Kind)
	}
	return r, err
}

// goneOr is why requests fail once the sandbox ended, else err.
func (i *instance) goneOr(err error) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone != nil {
		return i.gone
	}
	return err
}

// ListenEgress hands over the listener of the connections code inside
// opens to sandbox.EgressAddr; it can be taken once.
func (i *instance) ListenEgress(ctx context.Context) (net.Listener, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.policy.Network.Enabled() || i.egressOut {
		return nil, fmt.Errorf("egress: the sandbox has no egress rules, or its listener was taken: %w", sandbox.ErrInvalid)
	}
	if i.gone != nil {
		return nil, i.gone
	}
	i.egressOut = true
	return &egressListener{i: i, closed: make(chan struct{})}, nil
}

// Files reaches the sandbox's files through the guest.
func (i *instance) Files() sandbox.Files { return &files{i} }

// Destroy kills the machine, which takes everything inside with it, and
// removes its cgroup.
func (i *instance) Destroy(ctx context.Context) error {
	return i.kill(fmt.Errorf("sandbox %s: %w", i.id, sandbox.ErrDestroyed))
}

// kill ends the machine for reason and cleans up, once; a second call
// waits for the first and returns its error.
func (i *instance) kill(reason error) error {
	i.killOnce.Do(func() { i.killErr = i.teardown(reason) })
	return i.killErr
}

func (i *instance) teardown(reason error) error {
	i.fail(reason)
	var err error
	if i.m != nil {
		err = i.m.kill()
		if i.conn != nil {
			i.conn.Close()
		} else {
			i.m.conn.Close()
		}
		if i.m.cg != nil {
			err = errors.Join(err, i.m.cg.Remove())
		}
	}
	i.running.Wait()
	for len(i.egressQ) > 0 {
		(<-i.egressQ).Close()
	}
	i.mu.Lock()
	if i.err == nil {
		i.err = reason
		close(i.done)
	}
	i.mu.Unlock()
	return err
}
