package native_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestMain(m *testing.M) {
	if code, ok := childMode(); ok {
		os.Exit(code)
	}
	os.Exit(backendtest.Main(m, leftovers))
}

// leftovers lists what native sandboxes can leave on the host: init
// processes and cgroup folders.
func leftovers() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), "airlock-sandbox-init") {
			out = append(out, "process "+e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	for _, root := range cgroupRoots() {
		kids, _ := filepath.Glob(filepath.Join(root, "airlock", "*"))
		for _, k := range kids {
			if st, err := os.Stat(k); err == nil && st.IsDir() {
				out = append(out, "cgroup "+k)
			}
		}
	}
	return out
}

// cgroupRoots lists the mounted cgroup hierarchies.
func cgroupRoots() []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var roots []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && (f[i+1] == "cgroup" || f[i+1] == "cgroup2") {
				roots = append(roots, f[4])
			}
		}
	}
	return roots
}

func TestSuite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the native suite runs as root here (CI runs as root); rootless runs are covered by TestRootless")
	}
	backendtest.Run(t, backendtest.Config{
		Backend:   native.New(native.Options{}),
		Image:     "host",
		Leftovers: leftovers,
		WithEgressHooks: func(h egress.Hooks) sandbox.Backend {
			return native.New(native.Options{EgressHooks: h})
		},
	})
}
