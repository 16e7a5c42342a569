package gvisor

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestPanicEndsSandbox: a panic in a goroutine serving one sandbox ends
// that sandbox alone (containertest.PanicEndsSandbox).
func TestPanicEndsSandbox(t *testing.T) {
	be := New(Options{Runsc: containertest.Runsc(t)})
	testenv.Require(t, "root, and gVisor's runsc", be.Probe(context.Background()))
	containertest.PanicEndsSandbox(t, be, sandbox.HostImage(), func(inst sandbox.Instance) {
		inst.(*instance).sb.SetFault(func(where string) {
			if where == "result" {
				panic("injected by the test")
			}
		})
	})
}
