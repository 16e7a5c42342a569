package session

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// PoolSpec is one warm pool: sandboxes of one backend, image and policy,
// created ahead of the sessions that take them.
type PoolSpec struct {
	Backend string
	Image   string
	Policy  sandbox.Policy
	// Size is how many sandboxes wait in the pool.
	Size int
	// Warm readies a pooled session before it waits, for example by
	// starting an interpreter and importing libraries into it.
	Warm func(ctx context.Context, s *Session) error
}

// pool keeps up to spec.Size ready sessions; a session leaves the pool
// once, to one caller, and is never handed out again.
type pool struct {
	m       *Manager
	backend string
	be      sandbox.Backend
	img     sandbox.Image
	pol     sandbox.Policy
	warm    func(context.Context, *Session) error
	ready   chan *Session
	refill  chan struct{}
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// poolRetry is how long a pool waits after a failed fill.
const poolRetry = 2 * time.Second

func (m *Manager) newPool(ps PoolSpec) (*pool, error) {
	name, be, err := m.backend(ps.Backend)
	if err != nil {
		return nil, err
	}
	pol, err := ps.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	if ps.Image == "" {
		ps.Image = "host"
	}
	img, err := image.Resolve(m.opts.Images, ps.Image)
	if err != nil {
		return nil, err
	}
	if ps.Size <= 0 {
		return nil, fmt.Errorf("pool of %s on %s: size %d: %w", ps.Image, name, ps.Size, sandbox.ErrInvalid)
	}
	p := &pool{m: m, backend: name, be: be, img: img, pol: pol, warm: ps.Warm,
		ready: make(chan *Session, ps.Size), refill: make(chan struct{}, 1), stop: make(chan struct{})}
	p.wg.Add(1)
	go p.fill()
	return p, nil
}

// matches tells whether a request can take this pool's sandboxes.
func (p *pool) matches(backend string, img sandbox.Image, pol sandbox.Policy) bool {
	return p.backend == backend && reflect.DeepEqual(p.img, img) && reflect.DeepEqual(p.pol, pol)
}

// fill keeps the pool full until it is stopped.
func (p *pool) fill() {
	defer p.wg.Done()
	for {
		for len(p.ready) < cap(p.ready) {
			s, err := p.make()
			if err != nil {
				p.m.log.Warn("filling a warm pool failed", "backend", p.backend, "image", p.img.Name, "err", err)
				select {
				case <-time.After(poolRetry):
				case <-p.stop:
					return
				}
				continue
			}
			select {
			case p.ready <- s:
			case <-p.stop:
				_ = s.destroy(context.Background(), "the pool stopped")
				return
			}
		}
		select {
		case <-p.refill:
		case <-p.stop:
			return
		}
	}
}

// make creates and warms one pooled session.
func (p *pool) make() (*Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := p.m.start(ctx, p.backend, p.be, p.img, p.pol)
	if err != nil {
		return nil, err
	}
	s.pooled = true
	if p.warm != nil {
		if err := p.warm(ctx, s); err != nil {
			_ = s.destroy(context.Background(), "warming failed")
			return nil, err
		}
	}
	return s, nil
}

// take hands out a ready session, if one is, and asks for a refill.
func (p *pool) take() *Session {
	for {
		select {
		case s := <-p.ready:
			p.askRefill()
			select {
			case <-s.inst.Done(): // died while it waited
				_ = s.destroy(context.Background(), "died in the pool")
				continue
			default:
				return s
			}
		default:
			p.askRefill()
			return nil
		}
	}
}

func (p *pool) askRefill() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

// close stops filling and destroys the waiting sessions.
func (p *pool) close() {
	p.stopped.Do(func() { close(p.stop) })
	p.wg.Wait()
	for {
		select {
		case s := <-p.ready:
			_ = s.destroy(context.Background(), "the pool stopped")
		default:
			return
		}
	}
}

// fromPool takes a session from a matching pool; nil when none matches
// or the matching one is empty.
func (m *Manager) fromPool(ctx context.Context, backend string, img sandbox.Image, pol sandbox.Policy) (*Session, error) {
	for _, p := range m.pools {
		if !p.matches(backend, img, pol) {
			continue
		}
		if s := p.take(); s != nil {
			m.opts.Observer.Event(Event{Kind: EventPoolHit, Time: m.now(), Backend: backend, Image: img.Name})
			return s, nil
		}
		m.opts.Observer.Event(Event{Kind: EventPoolMiss, Time: m.now(), Backend: backend, Image: img.Name})
		return nil, nil
	}
	return nil, nil
}

// PoolReady says how many sessions wait in the pools, in all.
func (m *Manager) PoolReady() int {
	n := 0
	for _, p := range m.pools {
		n += len(p.ready)
	}
	return n
}

func (m *Manager) stopPools() {
	for _, p := range m.pools {
		p.close()
	}
}
