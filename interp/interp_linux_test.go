package interp_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/microvm"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The tests run real sandboxes on the native backend: the host image for
// the stdlib Python kernel, bash and node, the python image (built by
// .ci/lib/image.sh) for IPython.

func TestMain(m *testing.M) {
	os.Exit(backendtest.Main(m, nil))
}

var (
	backendOnce sync.Once
	backend     *native.Backend
)

func nativeBackend(t testing.TB) *native.Backend {
	t.Helper()
	testenv.Require(t, "root, for the native backend's full form", testenv.Root())
	backendOnce.Do(func() { backend = native.New(native.Options{}) })
	testenv.Require(t, "the native backend", backend.Probe(context.Background()))
	return backend
}

var (
	microvmOnce sync.Once
	microvmBe   *microvm.Backend
)

// microvmBackend is the microvm backend (under TCG unless
// AIRLOCK_MICROVM_ACCEL says otherwise) with the python image's store's
// cache and the CI's guest kernels (fetched if there are none):
// AIRLOCK_INTERP_BACKEND=microvm runs these tests in machines.
func microvmBackend(t testing.TB) *microvm.Backend {
	t.Helper()
	testenv.Require(t, "root", testenv.Root())
	img := pythonImage(t)
	kernels := testimage.Kernels(t)
	microvmOnce.Do(func() {
		accel := os.Getenv("AIRLOCK_MICROVM_ACCEL")
		if accel == "" {
			accel = microvm.AccelTCG
		}
		// the image's folder is STORE/NAME/rootfs; the boot files are
		// cached beside the store's own, not in them: CI runs these tests
		// beside the microvm package's, whose cache check would see
		// this binary's initramfs appear
		store := filepath.Dir(filepath.Dir(img.RootFS))
		microvmBe = microvm.New(microvm.Options{KernelDir: kernels, CacheDir: filepath.Join(store, ".microvm-interp"), Accel: accel})
	})
	testenv.Require(t, "the microvm backend", microvmBe.Probe(context.Background()))
	return microvmBe
}

// newSandbox creates a sandbox of img with the default policy changed by
// mod, destroyed when t ends.
func newSandbox(t testing.TB, img sandbox.Image, mod func(*sandbox.Policy)) sandbox.Instance {
	t.Helper()
	var p sandbox.Policy
	if mod != nil {
		mod(&p)
	}
	p, err := p.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	be := sandbox.Backend(nil)
	if os.Getenv("AIRLOCK_INTERP_BACKEND") == "microvm" {
		// a machine runs built images only: the python image stands in
		// for the host's folders (it has python3, bash and node)
		be = microvmBackend(t)
		if img.IsHost() {
			img = pythonImage(t)
		}
	} else {
		be = nativeBackend(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	inst, err := be.Create(ctx, sandbox.Spec{Image: img, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := inst.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return inst
}

func hostSandbox(t testing.TB) sandbox.Instance { return newSandbox(t, sandbox.HostImage(), nil) }

// pythonImage is the built python image, or a skip (a failure under CI).
func pythonImage(t testing.TB) sandbox.Image {
	t.Helper()
	img, err := testimage.Resolve()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh builds it; set AIRLOCK_HOME to the folder it prints)", err)
	return img
}

// start starts a context, closed when t ends.
func start(t testing.TB, inst sandbox.Instance, opts interp.Options) *interp.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := interp.Start(ctx, inst, opts)
	if err != nil {
		t.Fatalf("start %+v: %v", opts, err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// run runs code and fails t on a Go error.
func run(t testing.TB, c *interp.Context, code string, timeout time.Duration) interp.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x, err := c.Run(ctx, code, timeout, nil)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	return x
}

// text is the text/plain of the execution's last result, or "".
func text(x interp.Execution) string {
	if len(x.Results) == 0 {
		return ""
	}
	return x.Results[len(x.Results)-1][interp.MIMEText]
}

// interruptAfter runs code and ends its context once the call's stdout
// shows marker, so that the interrupt lands where the code has got to
// however slow the machine is (a timeout lands wherever the code is
// when it passes). It fails t unless the call ended by that interrupt.
func interruptAfter(t testing.TB, c *interp.Context, code, marker string) interp.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seen strings.Builder
	x, err := c.Run(ctx, code, 0, func(ev interp.Event) {
		if ev.Type == interp.EventStdout {
			if seen.WriteString(ev.Text); strings.Contains(seen.String(), marker) {
				cancel()
			}
		}
	})
	if !errors.Is(err, context.Canceled) || !x.Interrupted {
		t.Fatalf("run %q, interrupted after %q: %v, interrupted %v: %s", code, marker, err, x.Interrupted, events(x))
	}
	return x
}

// ok fails t unless the call ended without an error.
func ok(t testing.TB, x interp.Execution) interp.Execution {
	t.Helper()
	if x.Error != nil {
		t.Fatalf("unexpected error event: %s: %s\n%s\nstdout %q stderr %q", x.Error.Name, x.Error.Value,
			strings.Join(x.Error.Traceback, "\n"), x.Stdout, x.Stderr)
	}
	return x
}

// events lists the types of x's events, for messages.
func events(x interp.Execution) string {
	var b strings.Builder
	for _, ev := range x.Events {
		b.WriteString(ev.Type)
		if ev.Type == interp.EventError {
			b.WriteString("(" + ev.Name + ": " + ev.Value + ")")
		}
		if ev.Type == interp.EventRestarted {
			b.WriteString("(" + ev.Reason + ")")
		}
		b.WriteByte(' ')
	}
	if s := strings.TrimSpace(b.String()); len(s) <= 600 {
		return s
	}
	return strings.TrimSpace(b.String())[:300] + " … " + strings.TrimSpace(b.String())[b.Len()-300:]
}

// errorName is the name of x's error event, or "".
func errorName(x interp.Execution) string {
	if x.Error == nil {
		return ""
	}
	return x.Error.Name
}
