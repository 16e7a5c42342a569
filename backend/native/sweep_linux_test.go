package native_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestManySequentialExecs runs short commands back to back in one
// sandbox. The thread of init that starts a command joins the command's
// v1 cgroup folders before it forks and leaves them only as it exits, so
// a command that ends at once can be swept while that thread lingers
// there: the sweep then found init in cgroup.procs and killed it, and the
// sandbox died ("sandbox init exited") after a few dozen to a few
// hundred commands. The sweep spares init now.
func TestManySequentialExecs(t *testing.T) {
	testenv.Require(t, "root: the native suite runs as root here", testenv.Root())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	be := native.New(native.Options{})
	defer be.Close()
	pol, err := sandbox.Policy{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	inst, err := be.Create(ctx, sandbox.Spec{Image: sandbox.HostImage(), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	const n = 600
	for i := range n {
		res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("command %d of %d: %+v %v", i+1, n, res, err)
		}
	}
}
