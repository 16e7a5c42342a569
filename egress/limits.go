package egress

import (
	"fmt"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Caps used where a NetworkPolicy leaves a field zero.
const (
	DefaultMaxConnections  = 32
	DefaultMaxBytesOut     = 256 << 20
	DefaultMaxBytesIn      = 1 << 30
	DefaultMaxConnDuration = 10 * time.Minute
)

// Timeouts that protect the proxy from slow or silent clients and servers.
const (
	// handshakeTimeout bounds reading a request head, a SOCKS handshake or
	// a TLS ClientHello.
	handshakeTimeout = 30 * time.Second
	// idleTimeout bounds the wait for the next request on a kept-alive
	// HTTP connection.
	idleTimeout = 60 * time.Second
	// resolveTimeout bounds one DNS lookup.
	resolveTimeout = 10 * time.Second
	// dialTimeout bounds connecting to all the addresses of one host.
	dialTimeout = 15 * time.Second
)

// maxEvents caps the events kept; later ones are counted, not stored.
const maxEvents = 4096

// limits are the per-session caps of one proxy.
type limits struct {
	maxConns    int
	maxBytes    [2]int64
	maxDuration time.Duration
}

// direction names the two flows of bytes.
type direction int

const (
	out direction = iota // from the sandbox to the world
	in                   // from the world to the sandbox
)

// String names the direction as the policy does.
func (d direction) String() string {
	if d == out {
		return "max_bytes_out"
	}
	return "max_bytes_in"
}

// newLimits fills the policy's zero caps with defaults and refuses
// negative ones.
func newLimits(n sandbox.NetworkPolicy) (limits, error) {
	if n.MaxConnections < 0 || n.MaxBytesOut < 0 || n.MaxBytesIn < 0 || n.MaxConnDuration < 0 {
		return limits{}, fmt.Errorf("network caps must not be negative: %w", sandbox.ErrInvalid)
	}
	l := limits{
		maxConns:    orDefault(n.MaxConnections, DefaultMaxConnections),
		maxBytes:    [2]int64{orDefault(n.MaxBytesOut, DefaultMaxBytesOut), orDefault(n.MaxBytesIn, DefaultMaxBytesIn)},
		maxDuration: orDefault(time.Duration(n.MaxConnDuration), DefaultMaxConnDuration),
	}
	return l, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// meter accounts a session's use against its limits: upstream connection
// slots and byte budgets in each direction.
type meter struct {
	lim   limits
	mu    sync.Mutex
	conns int
	used  [2]int64
}

// acquire takes an upstream connection slot, or reports false at the cap.
func (m *meter) acquire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conns >= m.lim.maxConns {
		return false
	}
	m.conns++
	return true
}

// release gives back a slot taken by acquire.
func (m *meter) release() {
	m.mu.Lock()
	m.conns--
	m.mu.Unlock()
}

// reserve takes up to want bytes of a direction's budget and returns how
// many it got; zero means the budget is spent.
func (m *meter) reserve(d direction, want int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	got := min(want, m.lim.maxBytes[d]-m.used[d])
	m.used[d] += got
	return got
}

// refund gives back reserved bytes that were not used.
func (m *meter) refund(d direction, n int64) {
	if n == 0 {
		return
	}
	m.mu.Lock()
	m.used[d] -= n
	m.mu.Unlock()
}

// capError is the error of a spent byte budget; it wraps sandbox.ErrLimit.
func (m *meter) capError(d direction) error {
	return fmt.Errorf("%s cap of %d bytes reached: %w", d, m.lim.maxBytes[d], sandbox.ErrLimit)
}
