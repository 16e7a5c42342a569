package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Resolver looks up the addresses of a host name. *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Proxy.
type Options struct {
	// Policy holds the allow rules and the per-session caps; zero caps
	// take the Default* values of this package.
	Policy sandbox.NetworkPolicy
	// Logger receives every decision; nil discards them.
	Logger *slog.Logger
	// Hooks are for tests only; no policy can set them.
	Hooks Hooks
}

// Hooks replace the proxy's name lookups and dials, so that tests can
// point allowed names at servers of their own. No policy can set them;
// production leaves them zero.
type Hooks struct {
	// Resolver replaces net.DefaultResolver.
	Resolver Resolver
	// Dial replaces the TCP dialler. It receives exactly the address that
	// was checked.
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// bufSize is the read buffer of a client connection; it bounds a request
// head and a ClientHello.
const bufSize = 64 << 10

// socksVersion is the first byte of a SOCKS5 greeting.
const socksVersion = 5

// Proxy is one session's egress proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	rules    ruleSet
	meter    meter
	events   eventLog
	log      *slog.Logger
	resolver Resolver
	dial     func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]context.CancelFunc
	conns     map[net.Conn]struct{}
	clients   int
	wg        sync.WaitGroup
}

// New checks the policy and builds a proxy. Errors wrap sandbox.ErrInvalid.
func New(opts Options) (*Proxy, error) {
	rules, err := compileRules(opts.Policy.Allow)
	if err != nil {
		return nil, err
	}
	lim, err := newLimits(opts.Policy)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		rules:     rules,
		meter:     meter{lim: lim},
		events:    eventLog{log: log},
		log:       log,
		resolver:  opts.Hooks.Resolver,
		dial:      opts.Hooks.Dial,
		listeners: map[net.Listener]context.CancelFunc{},
		conns:     map[net.Conn]struct{}{},
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dial == nil {
		p.dial = netDial
	}
	return p, nil
}

// Env returns the variables that point a sandbox's programs at the proxy
// listening on proxyAddr ("127.0.0.1:PORT"), in upper and lower case, with
// NO_PROXY empty so that nothing bypasses it. The proxy also speaks SOCKS5
// on the same port, for programs that want socks5h://proxyAddr.
func Env(proxyAddr string) map[string]string {
	u := "http://" + proxyAddr
	env := map[string]string{}
	for k, v := range map[string]string{"HTTP_PROXY": u, "HTTPS_PROXY": u, "ALL_PROXY": u, "NO_PROXY": ""} {
		env[k] = v
		env[strings.ToLower(k)] = v
	}
	return env
}

// Events returns every decision so far, in order.
func (p *Proxy) Events() []sandbox.EgressEvent { return p.events.snapshot(0) }

// Cursor marks the decisions so far, for Since; a backend takes it before
// a command starts. A nil proxy (a sandbox without egress) gives 0.
func (p *Proxy) Cursor() int {
	if p == nil {
		return 0
	}
	return p.events.kept()
}

// Since returns the decisions made after cursor, in order; none for a nil
// proxy.
func (p *Proxy) Since(cursor int) []sandbox.EgressEvent {
	if p == nil {
		return nil
	}
	return p.events.snapshot(cursor)
}

// Serve accepts connections on l until ctx is done, l is closed or the
// proxy is closed. Before it returns it closes l and every connection it
// accepted, and waits for their handlers. It returns nil after such a
// stop and the accept error otherwise.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	if !p.addListener(l, cancel) {
		cancel()
		return fmt.Errorf("egress proxy is closed: %w", net.ErrClosed)
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer func() {
		stop()
		cancel()
		p.shutdown(l)
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("egress proxy accept: %w", err)
		}
		if p.admit(ctx, c) {
			go func() {
				defer p.wg.Done()
				defer p.forget(c, true)
				p.handle(ctx, c)
			}()
		}
	}
}

// Close stops every Serve call, cancels the lookups and dials in progress,
// closes every connection and waits for the handlers to finish. It is
// idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l, cancel := range p.listeners {
		cancel() // ends lookups and dials in progress
		l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// isClosed reports whether Close has been called.
func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// addListener registers a listener and the cancel function of its Serve
// call so that Close reaches them, or closes l and reports false when the
// proxy is already closed.
func (p *Proxy) addListener(l net.Listener, cancel context.CancelFunc) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		l.Close()
		return false
	}
	p.listeners[l] = cancel
	return true
}

// shutdown ends a Serve call: it closes its listener and, once no Serve
// call is left, every connection, and waits for the handlers.
func (p *Proxy) shutdown(l net.Listener) {
	p.mu.Lock()
	l.Close()
	delete(p.listeners, l)
	last := len(p.listeners) == 0
	if last {
		for c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	if last {
		p.wg.Wait()
	}
}

// maxClients caps the open connections from the sandbox to the proxy, so
// that idle ones cannot pile up in the host process.
func (p *Proxy) maxClients() int { return 2*p.meter.lim.maxConns + 8 }

// admit registers a new client connection, or closes it when the proxy is
// closed or too many are open. A registered connection has a handler
// counted in p.wg.
func (p *Proxy) admit(ctx context.Context, c net.Conn) bool {
	p.mu.Lock()
	ok := !p.closed && p.clients < p.maxClients()
	if ok {
		p.conns[c] = struct{}{}
		p.clients++
		p.wg.Add(1)
	}
	closed := p.closed
	p.mu.Unlock()
	if !ok {
		c.Close()
		if !closed {
			p.events.record(ctx, sandbox.EgressEvent{Reason: fmt.Sprintf("more than %d open connections to the proxy; connection closed", p.maxClients())})
		}
	}
	return ok
}

// track registers an upstream connection so that Close reaches it; it
// closes c and reports false when the proxy is closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// forget closes and unregisters a connection.
func (p *Proxy) forget(c net.Conn, client bool) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	if client {
		p.clients--
	}
	p.mu.Unlock()
}

// session is one client connection.
type session struct {
	p    *Proxy
	conn net.Conn
	br   *bufio.Reader
	// deadline is when the connection reaches its lifetime cap.
	deadline time.Time
}

// handle tells SOCKS5 from HTTP by the first byte and serves the
// connection.
func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	s := &session{p: p, conn: c, br: bufio.NewReaderSize(c, bufSize), deadline: time.Now().Add(p.meter.lim.maxDuration)}
	c.SetDeadline(s.deadline)
	s.readWithin(handshakeTimeout)
	first, err := s.br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		s.serveSOCKS(ctx)
		return
	}
	s.serveHTTP(ctx)
}

// readWithin sets a read deadline d from now, but not past the lifetime
// cap.
func (s *session) readWithin(d time.Duration) {
	s.conn.SetReadDeadline(earliest(time.Now().Add(d), s.deadline))
}

// earliest returns the earlier of two times.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// record stores an event for this session.
func (s *session) record(ctx context.Context, host string, port int, allowed bool, reason string) int {
	return s.p.events.record(ctx, sandbox.EgressEvent{Host: host, Port: port, Allowed: allowed, Reason: reason})
}

// lifetimeError turns a deadline error at the lifetime cap into a cap
// error wrapping sandbox.ErrLimit.
func (s *session) lifetimeError(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(s.deadline) {
		return fmt.Errorf("max_conn_duration cap of %s reached: %w", s.p.meter.lim.maxDuration, sandbox.ErrLimit)
	}
	return err
}

// capEvent records a cap that cut a connection short.
func (s *session) capEvent(ctx context.Context, host string, port int, err error) {
	if err = s.lifetimeError(err); errors.Is(err, sandbox.ErrLimit) {
		s.record(ctx, host, port, false, err.Error()+"; connection closed")
	}
}

// Attach gives inst an egress proxy: it builds one for opts.Policy and
// serves it on the listener the instance opens inside the sandbox
// (sandbox.NetworkAttacher). It is the one way egress is wired for every
// backend. It returns nil when the policy allows no egress. The caller
// closes the proxy.
func Attach(ctx context.Context, inst sandbox.Instance, opts Options) (*Proxy, error) {
	if !opts.Policy.Enabled() {
		return nil, nil
	}
	na, ok := inst.(sandbox.NetworkAttacher)
	if !ok {
		return nil, fmt.Errorf("egress: this backend cannot route egress: %w", sandbox.ErrUnsupported)
	}
	p, err := New(opts)
	if err != nil {
		return nil, err
	}
	l, err := na.ListenEgress(ctx)
	if err != nil {
		return nil, err
	}
	go func() { _ = p.Serve(context.Background(), l) }()
	return p, nil
}
