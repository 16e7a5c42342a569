package procs

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Sandbox is the part of a container sandbox's state that its processes
// share: whether it still takes processes and why it ended (Done, Err),
// the processes that run, and the lock that keeps a sweep from running
// while a process is being placed.
//
// The zero value is not usable; see New.
type Sandbox struct {
	id, backend string
	// destroy is the backend's Destroy, called when a goroutine serving
	// the sandbox fails.
	destroy func(context.Context) error

	seq atomic.Uint64
	// placing is held shared by a process from the runtime's start until
	// the host knows and has placed it (its cgroup folder, its pid), and
	// exclusively by a sweep, which may then take any process it cannot
	// place as a leftover.
	placing sync.RWMutex

	faults atomic.Pointer[func(where string)]

	mu    sync.Mutex
	ended error // set once: why the sandbox takes no more processes
	done  chan struct{}
	live  map[*Process]bool
	procs sync.WaitGroup // processes whose run has not finished
}

// New returns the shared state of sandbox id of backend; destroy is the
// backend's Destroy.
func New(id, backend string, destroy func(context.Context) error) *Sandbox {
	return &Sandbox{id: id, backend: backend, destroy: destroy, done: make(chan struct{}), live: map[*Process]bool{}}
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Done is closed when the sandbox has ended.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Err is nil while the sandbox runs, then why it ended.
func (s *Sandbox) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// End records why the sandbox ended, once: later calls change nothing.
// It reports whether this call ended it.
func (s *Sandbox) End(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return false
	}
	s.ended = err
	close(s.done)
	return true
}

// Destroyed ends the sandbox as destroyed.
func (s *Sandbox) Destroyed() {
	s.End(fmt.Errorf("sandbox %s: %w", s.id, sandbox.ErrDestroyed))
}

// Died ends the sandbox as having died by itself with cause (which
// should wrap sandbox.ErrDied), and destroys it so that nothing is left
// of it, unless it had already ended.
func (s *Sandbox) Died(cause error) {
	if s.End(cause) {
		go func() { _ = s.destroy(context.Background()) }()
	}
}

// Go runs fn in a goroutine that serves the sandbox: a panic in it ends
// the sandbox (Died, with the panic and its stack in the error) instead
// of the whole program.
func (s *Sandbox) Go(fn func()) {
	go func() {
		defer s.recover("a goroutine")
		fn()
	}()
}

// recover turns a panic of the calling goroutine into the sandbox's end.
func (s *Sandbox) recover(what string) {
	if r := recover(); r != nil {
		s.Died(Panicked(s.id, what, r))
	}
}

// Panicked is the error a goroutine's panic r becomes: it wraps
// sandbox.ErrDied and holds the stack.
func Panicked(id, what string, r any) error {
	return fmt.Errorf("sandbox %s: internal error in %s: %v: %w\n%s", id, what, r, sandbox.ErrDied, debug.Stack())
}

// Enter admits one more process, unless the sandbox has ended; the
// process leaves when its run ends (Run). Destroy waits for all to
// leave (Wait).
func (s *Sandbox) Enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return s.ended
	}
	s.procs.Add(1)
	return nil
}

// Leave undoes Enter for a process that never started.
func (s *Sandbox) Leave() { s.procs.Done() }

// Wait waits, at most for d, until every admitted process has left.
func (s *Sandbox) Wait(d time.Duration) bool {
	left := make(chan struct{})
	go func() { s.procs.Wait(); close(left) }()
	select {
	case <-left:
		return true
	case <-time.After(d):
		return false
	}
}

// NextID names the next process: p1, p2…
func (s *Sandbox) NextID() string { return fmt.Sprintf("p%d", s.seq.Add(1)) }

// Placing holds off sweeps until the returned function is called: from
// before the runtime starts a process until Run tracks it, so that every
// sweep either runs before the process exists or spares it.
func (s *Sandbox) Placing() func() {
	s.placing.RLock()
	return s.placing.RUnlock
}

// Sweeping holds off new placements while fn runs, and gives fn the
// in-sandbox pids of the live processes other than self (nil for none)
// whose trees it must spare.
func (s *Sandbox) Sweeping(self *Process, fn func(spare []int) error) error {
	s.placing.Lock()
	defer s.placing.Unlock()
	return fn(s.spare(self))
}

// spare lists the pids of the live processes but self, sorted.
func (s *Sandbox) spare(self *Process) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for p := range s.live {
		if p != self && p.pid > 0 {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Sandbox) track(p *Process, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.live[p] = true
	} else {
		delete(s.live, p)
	}
}

// SetFault makes f run at the points where a bug in a backend could
// panic ("result": as a process's Result is made); tests use it to check
// that a panic ends the sandbox alone.
func (s *Sandbox) SetFault(f func(where string)) { s.faults.Store(&f) }

func (s *Sandbox) fault(where string) {
	if f := s.faults.Load(); f != nil {
		(*f)(where)
	}
}
