package native_test

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestMain(m *testing.M) {
	if code, ok := childMode(); ok {
		os.Exit(code)
	}
	os.Exit(backendtest.Main(m, leftovers))
}

// leftovers lists what this process's native sandboxes left on the host:
// init processes it started and cgroup folders named after it. Other
// test binaries may run sandboxes at the same time; theirs are not ours.
func leftovers() []string { return leftoversOf(os.Getpid()) }

// leftoversOf lists the init processes and cgroups of airlock process pid.
func leftoversOf(pid int) []string {
	out := leakcheck.Inits(pid)
	for _, d := range leakcheck.Cgroups(pid) {
		out = append(out, "cgroup "+d)
	}
	return out
}

func TestSuite(t *testing.T) {
	testenv.Require(t, "root: the native suite runs as root here (CI does; rootless runs are covered by TestRootless)", testenv.Root())
	backendtest.Run(t, backendtest.Config{
		Backend:   native.New(native.Options{}),
		Image:     sandbox.HostImage(),
		DataImage: dataImage(t),
		Leftovers: leftovers,
	})
}

// dataImage is the python image for the suite's data-work test; without
// one that test skips, saying why (under CI it fails).
func dataImage(t *testing.T) sandbox.Image {
	img, err := testimage.Resolve()
	if err != nil {
		t.Logf("the data image test will skip: %v (bash .ci/lib/image.sh builds the image)", err)
	}
	return img
}

// TestSuiteUnifiedSweep runs the suite with every process tracked and
// swept in the unified (v2) hierarchy, the way a pure cgroup v2 host
// does: processes start through the exec stub, cloned into their cgroup
// folder, and are swept with cgroup.kill. The caps stay on v1 here.
func TestSuiteUnifiedSweep(t *testing.T) {
	testenv.Require(t, "root: the native suite runs as root here", testenv.Root())
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err != nil {
		testenv.Require(t, "a cgroup2 mount at /sys/fs/cgroup/unified", err)
	}
	backendtest.Run(t, backendtest.Config{
		Backend:   native.New(native.Options{TrackUnified: true}),
		Image:     sandbox.HostImage(),
		DataImage: dataImage(t),
		Leftovers: leftovers,
	})
}
