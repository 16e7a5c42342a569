package e2b_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/gvisor"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestOtherBackends runs the commands and code-interpreter programs once
// on docker (runc, on the remapped daemon CI starts) and once on gVisor:
// the SDKs see the same surface whatever runs the sandbox.
func TestOtherBackends(t *testing.T) {
	probed := func(t testing.TB, be interface {
		sandbox.Backend
		Probe(context.Context) error
	}, what string) sandbox.Backend {
		t.Cleanup(func() { _ = be.Close() })
		testenv.Require(t, what, be.Probe(context.Background()))
		return be
	}
	cases := []backendCase{
		{"docker", func(t testing.TB) sandbox.Backend {
			return probed(t, docker.New(docker.Options{Runtime: docker.RuntimeRunc}), "docker with runc on a remapped daemon (bash .ci/lib/docker.sh start)")
		}},
		{"gvisor", func(t testing.TB) sandbox.Backend {
			runsc, err := exec.LookPath("runsc")
			testenv.Require(t, "gVisor's runsc in PATH (bash .ci/lib/runsc.sh builds it)", err)
			return probed(t, gvisor.New(gvisor.Options{Runsc: runsc}), "root, and gVisor's runsc")
		}},
	}
	for _, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			ts := startServer(t, bc, serverOptions{})
			for _, program := range []string{"commands.mjs", "interp.mjs"} {
				runNode(t, ts, program)
			}
		})
	}
}
