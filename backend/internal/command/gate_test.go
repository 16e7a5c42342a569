package command

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestGateSweepsWhenTheLastLeaves(t *testing.T) {
	var g Gate
	sweeps := 0
	sweep := func() error { sweeps++; return nil }
	if err := g.Enter(); err != nil {
		t.Fatal(err)
	}
	if err := g.Enter(); err != nil {
		t.Fatal(err)
	}
	if ran, _ := g.Alone(sweep); ran {
		t.Errorf("Alone swept with two commands in")
	}
	_ = g.Leave(sweep)
	if sweeps != 0 {
		t.Errorf("swept with a command still in")
	}
	_ = g.Leave(sweep)
	if sweeps != 1 {
		t.Errorf("the last one out: %d sweeps, want 1", sweeps)
	}
}

func TestGateAloneSparesTheLeavingSweep(t *testing.T) {
	var g Gate
	sweeps := 0
	sweep := func() error { sweeps++; return nil }
	_ = g.Enter()
	if ran, err := g.Alone(sweep); !ran || err != nil {
		t.Fatalf("Alone with one command in: %v %v", ran, err)
	}
	_ = g.Leave(sweep)
	if sweeps != 1 {
		t.Errorf("%d sweeps, want the one of Alone only", sweeps)
	}
	// a failed sweep leaves the gate dirty: the leaving sweeps again
	_ = g.Enter()
	_, _ = g.Alone(func() error { return errors.New("failed") })
	_ = g.Leave(sweep)
	if sweeps != 2 {
		t.Errorf("after a failed Alone: %d sweeps, want 2", sweeps)
	}
}

func TestGateHoldsNewCommandsDuringASweep(t *testing.T) {
	var g Gate
	_ = g.Enter()
	release := make(chan struct{})
	var order []string
	var mu sync.Mutex
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		_ = g.Leave(func() error { note("sweep start"); <-release; note("sweep end"); return nil })
		close(done)
	}()
	time.Sleep(20 * time.Millisecond)
	entered := make(chan struct{})
	go func() {
		_ = g.Enter()
		note("entered")
		close(entered)
	}()
	time.Sleep(20 * time.Millisecond)
	close(release)
	<-done
	<-entered
	if len(order) != 3 || order[2] != "entered" {
		t.Errorf("order %v: a command entered during a sweep", order)
	}
	g.Close()
	if err := g.Enter(); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("Enter after Close: %v", err)
	}
}
