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
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
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

func newBackend(t *testing.T) *gvisor.Backend {
	t.Helper()
	be := gvisor.New(gvisor.Options{Runsc: containertest.Runsc(t)})
	testenv.Require(t, "root, and gVisor's runsc", be.Probe(context.Background()))
	return be
}

// dataImage is the built python image, or skips t (fails it under CI).
func dataImage(t *testing.T) sandbox.Image {
	t.Helper()
	img, err := testimage.Resolve()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
	return img
}

// TestSuiteImage runs the suite on the python image's folder (no image
// environment, which the environment check does not expect), and the
// data-work test on the python image itself.
func TestSuiteImage(t *testing.T) {
	folder, err := image.Resolve(nil, testimage.Folder(t))
	if err != nil {
		t.Fatal(err)
	}
	backendtest.Run(t, backendtest.Config{Backend: newBackend(t), Image: folder,
		Skip:      containertest.Merge(containertest.GVisorSkips, containertest.ProfileSkips, containertest.ImageSkips),
		Leftovers: leftovers, PidsReserve: gvisor.KeeperTasks, DataImage: dataImage(t)})
}

func TestSuiteHost(t *testing.T) {
	backendtest.Run(t, backendtest.Config{Backend: newBackend(t), Image: sandbox.HostImage(), Skip: containertest.Merge(containertest.GVisorSkips, containertest.ProfileSkips),
		Leftovers: leftovers, PidsReserve: gvisor.KeeperTasks, DataImage: dataImage(t)})
}
