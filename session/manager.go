package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Options configure a Manager.
type Options struct {
	// Backends are the backends sessions may run on, by name. The Manager
	// uses them and closes them in Close.
	Backends map[string]sandbox.Backend
	// DefaultBackend is the backend of a session that names none; default
	// "native" when there is one, else the only one.
	DefaultBackend string
	// Images finds built images by name; nil means only "host" and folder
	// paths name images.
	Images image.Lookup
	// MaxSessions caps the sessions alive at once; 0 means 1024.
	MaxSessions int
	// Quota, when set, says what one owner may hold; nil means no cap per
	// owner beyond MaxSessions.
	Quota func(owner string) Quota
	// DefaultTTL is a session's lifetime when its request gives none;
	// 0 means an hour. MaxTTL bounds what a request may ask; 0 means a day.
	DefaultTTL, MaxTTL time.Duration
	// DefaultIdle ends a session that nothing used for this long; 0 means
	// 15 minutes.
	DefaultIdle time.Duration
	// Pools are the warm pools to keep.
	Pools []PoolSpec
	// Observer receives what happens, for an audit log and metrics; nil
	// drops it.
	Observer Observer
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
	// EgressHooks replace the egress proxies' lookups and dials. They are
	// for tests; no request can set them.
	EgressHooks egress.Hooks
	// ReapEvery is how often expired and idle sessions are looked for;
	// 0 means every second.
	ReapEvery time.Duration
	// Now replaces the clock, for tests.
	Now func() time.Time
}

// Quota is what one owner may hold at once.
type Quota struct {
	Sessions    int     // 0: no cap
	MemoryBytes int64   // the memory caps of the owner's sessions, added up; 0: no cap
	CPUs        float64 // their CPU quotas, added up; 0: no cap
}

// CreateOptions describe a session to create.
type CreateOptions struct {
	// Owner is the tenant the session belongs to; only it sees the session.
	Owner string
	// Backend names the backend; "" is the Manager's default.
	Backend string
	// Image names the image ("host", a built image, a folder); "" is "host".
	Image string
	// Policy is the sandbox's policy; it is normalized here.
	Policy sandbox.Policy
	// TTL is the session's lifetime; 0 is the Manager's default.
	TTL time.Duration
	// IdleTimeout ends the session when nothing used it for this long; 0 is
	// the Manager's default.
	IdleTimeout time.Duration
	// Metadata is the caller's, kept and listed with the session.
	Metadata map[string]string
}

// Manager holds the sessions of one airlock process.
type Manager struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu       sync.Mutex
	sessions map[string]*Session
	reserved []reservation        // sessions being created, counted against the caps
	ended    map[string]tombstone // sessions that ended, for a clear answer
	closed   bool

	pools []*pool
	stop  chan struct{}
	wg    sync.WaitGroup
}

// tombstone remembers why a session ended, for a while.
type tombstone struct {
	owner, reason string
	at            time.Time
}

// Bounds of the memory of ended sessions.
const (
	maxTombstones = 10000
	tombstoneTTL  = time.Hour
)

// Errors of the Manager besides sandbox's sentinels.
var (
	// ErrEnded means the session existed and has ended (TTL, idle, its
	// sandbox died, destroyed); Ended tells why.
	ErrEnded = errors.New("session ended")
)

// New returns a Manager: it removes what a dead airlock left on every
// backend, starts the reaper and fills the warm pools.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if len(opts.Backends) == 0 {
		return nil, fmt.Errorf("session manager: no backend: %w", sandbox.ErrInvalid)
	}
	if opts.DefaultBackend == "" {
		if _, ok := opts.Backends["native"]; ok || len(opts.Backends) > 1 {
			opts.DefaultBackend = "native"
		} else {
			for name := range opts.Backends {
				opts.DefaultBackend = name
			}
		}
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 1024
	}
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = time.Hour
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = 24 * time.Hour
	}
	if opts.DefaultIdle <= 0 {
		opts.DefaultIdle = 15 * time.Minute
	}
	if opts.ReapEvery <= 0 {
		opts.ReapEvery = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Observer == nil {
		opts.Observer = discard{}
	}
	m := &Manager{opts: opts, log: opts.Logger, now: opts.Now,
		sessions: map[string]*Session{}, ended: map[string]tombstone{}, stop: make(chan struct{})}
	// What dead airlocks left is only theirs: removing it runs beside the
	// first sessions.
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for _, name := range sortedKeys(opts.Backends) {
			for _, r := range opts.Backends[name].CleanupStale(context.WithoutCancel(ctx)) {
				m.log.Info("removed what a dead airlock left", "backend", name, "what", r)
			}
		}
	}()
	for _, ps := range opts.Pools {
		p, err := m.newPool(ps)
		if err != nil {
			m.stopPools()
			return nil, err
		}
		m.pools = append(m.pools, p)
	}
	m.wg.Add(1)
	go m.reap()
	return m, nil
}

// newID makes a session id: 128 random bits, hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// backend finds a backend by name.
func (m *Manager) backend(name string) (string, sandbox.Backend, error) {
	if name == "" {
		name = m.opts.DefaultBackend
	}
	be, ok := m.opts.Backends[name]
	if !ok {
		have := make([]string, 0, len(m.opts.Backends))
		for n := range m.opts.Backends {
			have = append(have, n)
		}
		sort.Strings(have)
		return "", nil, fmt.Errorf("backend %q is not served here (have: %s): %w", name, strings.Join(have, ", "), sandbox.ErrInvalid)
	}
	return name, be, nil
}

// Create starts a session: from a warm pool when one matches, else a new
// sandbox.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Session, error) {
	start := time.Now()
	name, be, err := m.backend(o.Backend)
	if err != nil {
		return nil, err
	}
	pol, err := o.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	if o.Image == "" {
		o.Image = "host"
	}
	img, err := image.Resolve(m.opts.Images, o.Image)
	if err != nil {
		return nil, err
	}
	ttl, idle, err := m.lifetimes(o)
	if err != nil {
		return nil, err
	}
	if err := m.admit(o.Owner, pol); err != nil {
		return nil, err
	}
	s, err := m.fromPool(ctx, name, img, pol)
	if err == nil && s == nil {
		s, err = m.start(ctx, name, be, img, pol)
	}
	if err != nil {
		m.release(o.Owner)
		return nil, err
	}
	now := m.now()
	s.owner, s.metadata = o.Owner, cloneMap(o.Metadata)
	s.created, s.expires, s.idle = now, now.Add(ttl), idle
	s.lastUsed.Store(now.UnixNano())
	if err := s.publish(ctx); err != nil {
		m.release(o.Owner)
		_ = s.destroy(context.Background(), "its record could not be kept")
		return nil, fmt.Errorf("session %s: keep its record beside the sandbox: %w", s.id, err)
	}
	m.mu.Lock()
	m.dropReservation(o.Owner)
	if m.closed {
		m.mu.Unlock()
		_ = s.destroy(context.Background(), "the session manager is closing")
		return nil, fmt.Errorf("session manager closed: %w", sandbox.ErrDestroyed)
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	go m.watch(s)
	m.opts.Observer.Event(Event{Kind: EventCreated, Session: s.id, Owner: s.owner, Time: now, Backend: name, Image: img.Name,
		Pooled: s.pooled, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
		Detail: fmt.Sprintf("memory %s, cpus %g, pids %d, ttl %v", sandbox.FormatSize(pol.Limits.MemoryBytes), pol.Limits.CPUs, pol.Limits.Pids, ttl)})
	m.log.Info("session created", "id", s.id, "owner", s.owner, "backend", name, "image", img.Name, "pooled", s.pooled)
	return s, nil
}

// MaxTTL is the longest lifetime, and idle timeout, a session may ask.
func (m *Manager) MaxTTL() time.Duration { return m.opts.MaxTTL }

// lifetimes checks a request's TTL and idle timeout.
func (m *Manager) lifetimes(o CreateOptions) (time.Duration, time.Duration, error) {
	ttl, idle := o.TTL, o.IdleTimeout
	if ttl == 0 {
		ttl = m.opts.DefaultTTL
	}
	if idle == 0 {
		idle = m.opts.DefaultIdle
	}
	if ttl < 0 || ttl > m.opts.MaxTTL {
		return 0, 0, fmt.Errorf("ttl %v out of range (up to %v): %w", ttl, m.opts.MaxTTL, sandbox.ErrInvalid)
	}
	if idle < 0 || idle > m.opts.MaxTTL {
		return 0, 0, fmt.Errorf("idle timeout %v out of range (up to %v): %w", idle, m.opts.MaxTTL, sandbox.ErrInvalid)
	}
	return ttl, idle, nil
}

// admit reserves room for one more session of owner, or says which cap
// is full. release gives it back when the create fails.
func (m *Manager) admit(owner string, pol sandbox.Policy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("session manager closed: %w", sandbox.ErrDestroyed)
	}
	if len(m.sessions)+m.pending() >= m.opts.MaxSessions {
		return fmt.Errorf("%d sessions are running, the most this server runs: %w", m.opts.MaxSessions, sandbox.ErrLimit)
	}
	if m.opts.Quota == nil {
		m.reserve(owner, pol)
		return nil
	}
	q := m.opts.Quota(owner)
	n, mem, cpus := m.usage(owner)
	switch {
	case q.Sessions > 0 && n+1 > q.Sessions:
		return fmt.Errorf("tenant %q has %d sessions, its quota: %w", owner, n, sandbox.ErrLimit)
	case q.MemoryBytes > 0 && mem+pol.Limits.MemoryBytes > q.MemoryBytes:
		return fmt.Errorf("tenant %q's sessions would hold %s of memory, over its quota of %s: %w", owner,
			sandbox.FormatSize(mem+pol.Limits.MemoryBytes), sandbox.FormatSize(q.MemoryBytes), sandbox.ErrLimit)
	case q.CPUs > 0 && cpus+pol.Limits.CPUs > q.CPUs:
		return fmt.Errorf("tenant %q's sessions would hold %g CPUs, over its quota of %g: %w", owner, cpus+pol.Limits.CPUs, q.CPUs, sandbox.ErrLimit)
	}
	m.reserve(owner, pol)
	return nil
}

// Reservations of sessions being created, counted with the live ones.
type reservation struct {
	owner string
	mem   int64
	cpus  float64
}

func (m *Manager) pending() int { return len(m.reserved) }

// usage adds up owner's live and reserved sessions.
func (m *Manager) usage(owner string) (int, int64, float64) {
	n, mem, cpus := 0, int64(0), 0.0
	for _, s := range m.sessions {
		if s.owner == owner {
			n++
			mem += s.policy.Limits.MemoryBytes
			cpus += s.policy.Limits.CPUs
		}
	}
	for _, r := range m.reserved {
		if r.owner == owner {
			n++
			mem += r.mem
			cpus += r.cpus
		}
	}
	return n, mem, cpus
}

func (m *Manager) reserve(owner string, pol sandbox.Policy) {
	m.reserved = append(m.reserved, reservation{owner, pol.Limits.MemoryBytes, pol.Limits.CPUs})
}

// release drops one reservation of owner.
func (m *Manager) release(owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropReservation(owner)
}

func (m *Manager) dropReservation(owner string) {
	if k := slices.IndexFunc(m.reserved, func(r reservation) bool { return r.owner == owner }); k >= 0 {
		m.reserved = slices.Delete(m.reserved, k, k+1)
	}
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
