package docker

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestPanicEndsSandbox: a panic in a goroutine serving one sandbox ends
// that sandbox alone (containertest.PanicEndsSandbox), on each runtime.
func TestPanicEndsSandbox(t *testing.T) {
	for _, rt := range []string{RuntimeRunc, RuntimeRunsc} {
		t.Run(rt, func(t *testing.T) {
			be := New(Options{Runtime: rt})
			defer be.Close()
			testenv.Require(t, "docker with runtime "+rt+" (bash .ci/lib/docker.sh start)", be.Probe(context.Background()))
			img, err := testimage.Resolve()
			testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
			containertest.PanicEndsSandbox(t, be, img, func(inst sandbox.Instance) {
				inst.(*instance).sb.SetFault(func(where string) {
					if where == "result" {
						panic("injected by the test")
					}
				})
			})
		})
	}
}
