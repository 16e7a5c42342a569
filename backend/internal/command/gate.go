package command

import (
	"fmt"
	"sync"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Gate admits commands into one sandbox. When the last running command
// leaves, it sweeps (kills what the commands left) before any new command
// is admitted, so that nothing outlives its command unless another
// command still runs. A sweep that a command did alone (see Alone)
// spares the sweep at its leaving, unless another command came since.
type Gate struct {
	mu       sync.Mutex
	idle     *sync.Cond
	running  int
	sweeping bool
	closed   bool
	dirty    bool // a command entered since the last sweep
}

// Enter admits one command, waiting while a sweep runs. After Close it
// fails with sandbox.ErrDestroyed.
func (g *Gate) Enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	for g.sweeping && !g.closed {
		g.idle.Wait()
	}
	if g.closed {
		return fmt.Errorf("sandbox: %w", sandbox.ErrDestroyed)
	}
	g.running++
	g.dirty = true
	return nil
}

// Leave ends one command; the last one out runs sweep, unless the gate
// is closed.
func (g *Gate) Leave(sweep func() error) error {
	g.mu.Lock()
	g.running--
	if g.running > 0 || g.sweeping || g.closed || !g.dirty {
		g.mu.Unlock()
		return nil
	}
	g.sweeping = true
	g.mu.Unlock()
	return g.finishSweep(sweep)
}

// Run admits one command, runs it, and lets it leave with sweep (see
// Enter and Leave). The command's error comes first, then the sweep's.
func (g *Gate) Run(command, sweep func() error) error {
	if err := g.Enter(); err != nil {
		return err
	}
	err := command()
	if lerr := g.Leave(sweep); err == nil {
		err = lerr
	}
	return err
}

// Alone runs sweep if at most one command is admitted (the caller's own),
// holding new commands back meanwhile, and reports whether it ran.
func (g *Gate) Alone(sweep func() error) (bool, error) {
	g.mu.Lock()
	g.init()
	if g.running > 1 || g.sweeping || g.closed {
		g.mu.Unlock()
		return false, nil
	}
	g.sweeping = true
	g.mu.Unlock()
	return true, g.finishSweep(sweep)
}

func (g *Gate) finishSweep(sweep func() error) error {
	err := sweep()
	g.mu.Lock()
	g.sweeping = false
	if err == nil {
		g.dirty = false
	}
	g.idle.Broadcast()
	g.mu.Unlock()
	return err
}

// Close refuses every later command and wakes those waiting.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	g.closed = true
	g.idle.Broadcast()
}

func (g *Gate) init() {
	if g.idle == nil {
		g.idle = sync.NewCond(&g.mu)
	}
}
