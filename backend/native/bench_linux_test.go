package native_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The benchmarks time one whole sandboxed run (create, run a command,
// destroy), cold and with a prestarted sandbox (the pool refills between
// runs, untimed, as it would between a server's requests), beside
// baselines measured in the same run: bubblewrap with the
// same read-only /usr, fresh /proc and minimal /dev (it sets up no cgroups,
// seccomp or Landlock by default), and the bare command with no sandbox.
// Each reports the median in ms next to Go's mean.
//
//	go test -run '^$' -bench . -benchtime 200x ./backend/native

// bwrapArgs give bubblewrap a root comparable to the host image's.
var bwrapArgs = []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
	"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
	"--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}

func sandboxRun(b *testing.B, be *native.Backend, cmd ...string) func() error {
	p, err := sandbox.Policy{}.Normalize()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func() error {
		inst, err := be.Create(ctx, sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
		if err != nil {
			return err
		}
		res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: cmd})
		if derr := inst.Destroy(ctx); err == nil {
			err = derr
		}
		if err == nil && res.ExitCode != 0 {
			b.Fatalf("%v exited %d: %s", cmd, res.ExitCode, res.Stderr)
		}
		return err
	}
}

// refilled waits, untimed, until the backend has a sandbox prestarted: a
// server between requests. The first Create starts the pool.
func refilled(be *native.Backend) func() {
	return func() {
		for deadline := time.Now().Add(5 * time.Second); be.Prestarted() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
}

func hostRun(name string, args ...string) func() error {
	return func() error { return exec.Command(name, args...).Run() }
}

func benchRoot(b *testing.B) {
	testenv.Require(b, "root, for the native backend's full form", testenv.Root())
}

// BenchmarkTrue: create + run /bin/true + destroy, with each sandbox
// started on demand, and with one always prestarted (Options.Prestart).
func BenchmarkTrue(b *testing.B) {
	benchRoot(b)
	be := native.New(native.Options{})
	b.Run("airlock-native", func(b *testing.B) { testenv.Median(b, sandboxRun(b, be, "/bin/true"), nil) })
	warm := native.New(native.Options{Prestart: 1})
	defer warm.Close()
	b.Run("airlock-native-prestart", func(b *testing.B) { testenv.Median(b, sandboxRun(b, warm, "/bin/true"), refilled(warm)) })
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Logf("bwrap baseline skipped: bubblewrap is not installed (apt-get install bubblewrap)")
		return
	}
	b.Run("bwrap", func(b *testing.B) { testenv.Median(b, hostRun("bwrap", append(bwrapArgs, "/bin/true")...), nil) })
	b.Run("bare", func(b *testing.B) { testenv.Median(b, hostRun("/bin/true"), nil) })
}

// BenchmarkPython: the overhead over a bare `python3 -c pass`.
func BenchmarkPython(b *testing.B) {
	benchRoot(b)
	be := native.New(native.Options{})
	b.Run("airlock-native", func(b *testing.B) { testenv.Median(b, sandboxRun(b, be, "python3", "-c", "pass"), nil) })
	warm := native.New(native.Options{Prestart: 1})
	defer warm.Close()
	b.Run("airlock-native-prestart", func(b *testing.B) {
		testenv.Median(b, sandboxRun(b, warm, "python3", "-c", "pass"), refilled(warm))
	})
	// the sandbox runs Debian's python3; a version manager's shim on PATH
	// would make the bare run slower than it is
	b.Run("bare", func(b *testing.B) { testenv.Median(b, hostRun("/usr/bin/python3", "-c", "pass"), nil) })
}
