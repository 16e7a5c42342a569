package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/gvisor"
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/testimage"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestMain(m *testing.M) {
	if childMode() {
		return
	}
	os.Exit(backendtest.Main(m, leftovers))
}

// stateDir is the backend's default folder for the sandboxes' folders.
const stateDir = "/run/airlock/gvisor"

// leftovers lists what this test process's sandboxes left: their folders,
// the runsc processes serving them (their command lines name the
// folders), and their cgroups.
func leftovers() []string {
	prefix := filepath.Join(stateDir, hostdir.Owner()+"-")
	out := containertest.OwnFolders(stateDir)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), prefix) {
			out = append(out, "process "+e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	groups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/airlock-gvisor", hostdir.Owner()+"-*"))
	for _, g := range groups {
		out = append(out, "cgroup "+g)
	}
	return out
}

func newBackend(t *testing.T, images image.Lookup) *gvisor.Backend {
	t.Helper()
	be := gvisor.New(gvisor.Options{Runsc: containertest.Runsc(t), Images: images})
	testenv.Require(t, "root, and gVisor's runsc", be.Probe(context.Background()))
	return be
}

// TestSuiteImage runs the suite on the python image's folder (no image
// environment, which the environment check does not expect), and the
// data-work test on the python image itself.
func TestSuiteImage(t *testing.T) {
	be := newBackend(t, testimage.Store(t))
	backendtest.Run(t, backendtest.Config{Backend: be, Image: testimage.Folder(t), Skip: containertest.Merge(containertest.GVisorSkips, containertest.ProfileSkips, containertest.ImageSkips),
		Leftovers: leftovers, PidsReserve: gvisor.KeeperTasks, WithEgressHooks: withHooks(t, testimage.Store(t)),
		DataImage: containertest.Image})
}

func TestSuiteHost(t *testing.T) {
	be := newBackend(t, testimage.Store(t))
	backendtest.Run(t, backendtest.Config{Backend: be, Image: "host", Skip: containertest.Merge(containertest.GVisorSkips, containertest.ProfileSkips),
		Leftovers: leftovers, PidsReserve: gvisor.KeeperTasks, WithEgressHooks: withHooks(t, nil),
		DataImage: containertest.Image})
}

// withHooks makes backends whose egress proxy uses the suite's test hooks.
func withHooks(t *testing.T, images image.Lookup) func(egress.Hooks) sandbox.Backend {
	runsc := containertest.Runsc(t)
	return func(h egress.Hooks) sandbox.Backend {
		return gvisor.New(gvisor.Options{Runsc: runsc, Images: images, EgressHooks: h})
	}
}
