//go:build linux

package backendtest

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Config describes the backend under test.
type Config struct {
	Backend sandbox.Backend
	// Image is the image the sandboxes run (the host image for native).
	Image sandbox.Image
	// Skip maps the name of a subtest or of a probe check to the reason it
	// cannot apply to this backend.
	Skip map[string]string
	// Leftovers lists what the backend left on the host (processes,
	// cgroups, containers…); the suite calls it after destroying sandboxes
	// and fails on anything listed.
	Leftovers func() []string
	// DataImage is the built data-work image (package image's "python")
	// the backend can run; the zero Image skips that test, saying so.
	DataImage sandbox.Image
	// PidsReserve is how many tasks the backend adds to the pids cap for
	// its own processes inside the sandbox, as it documents.
	PidsReserve int
	// AgentExe is the program of the backend's own processes where they
	// run as the sandbox user (the kubernetes backend's agent: the Pod's
	// runAsUser is the sandbox's); the checks that count the sandbox
	// user's processes leave out those whose argv[0] it is.
	AgentExe string
	// StdioDir is the folder inside where the backend keeps the FIFOs
	// that carry processes' stdio, if it does: descriptors 0-2 may point
	// there, at FIFOs already unlinked.
	StdioDir string
	// FilterENOSYS names the privilege checks whose system calls the
	// backend's filter refuses with ENOSYS where the check expects EPERM
	// (runc answers ENOSYS to calls newer than every call its profile
	// names). The check then requires ENOSYS: still the filter's answer,
	// not the kernel's.
	FilterENOSYS []string
	// CreateTimeout bounds each Create after an image's first; default
	// one minute. A backend that boots a machine without hardware
	// virtualisation needs more.
	CreateTimeout time.Duration
	// ManyRuns is how many sandboxes "many runs" creates and destroys one
	// after another; default 20. A backend whose every sandbox boots a
	// machine may run fewer, saying why in its test.
	ManyRuns int
	// TimeScale multiplies the short timeouts that the process, abuse and
	// leftover tests give their commands (seconds, for a fork or a python3
	// start);
	// default 1. A backend that translates every instruction (QEMU's TCG)
	// needs more to start a program at all.
	TimeScale float64
}

//go:embed probes
var probeFS embed.FS

// Run runs the whole suite against one backend.
func Run(t *testing.T, c Config) {
	testenv.Require(t, "backend "+c.Backend.Name(), c.Backend.Probe(context.Background()))
	s := &suite{Config: c}
	t.Run("first sandbox of each image", s.testFirstSandboxes)
	t.Run("conformance", s.conformance)
	t.Run("security", s.security)
	t.Run("data image", s.testDataImage)
}

// suite holds the config and helpers shared by the tests.
type suite struct {
	Config
	mu      sync.Mutex
	checked map[*testing.T]bool
}

// skip skips t when the config lists name, printing the reason.
func (s *suite) skip(t *testing.T, name string) {
	t.Helper()
	if why, ok := s.Skip[name]; ok {
		t.Skipf("%s: does not apply to backend %s: %s", name, s.Backend.Name(), why)
	}
}

// skipped tells whether the check called name, one part of a test, does
// not apply to the backend, and if so logs why.
func (s *suite) skipped(t *testing.T, name string) bool {
	t.Helper()
	why, ok := s.Skip[name]
	if ok {
		t.Logf("check skipped: %s: does not apply to backend %s: %s", name, s.Backend.Name(), why)
	}
	return ok
}

// Policy returns a normalized policy after applying edit (if any) to the
// defaults.
func Policy(t *testing.T, edit func(*sandbox.Policy)) sandbox.Policy {
	t.Helper()
	var p sandbox.Policy
	if edit != nil {
		edit(&p)
	}
	p, err := p.Normalize()
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

// create starts a sandbox that is destroyed when the test ends.
func (s *suite) create(t *testing.T, p sandbox.Policy) sandbox.Instance {
	t.Helper()
	s.checkLeftoversAtEnd(t)
	return CreateWithin(t, s.createTimeout(), s.Backend, s.Image, p)
}

// scaled is d times the config's TimeScale.
func (s *suite) scaled(d time.Duration) sandbox.Duration {
	if s.TimeScale > 1 {
		d = time.Duration(float64(d) * s.TimeScale)
	}
	return sandbox.Duration(d)
}

func (s *suite) createTimeout() time.Duration {
	if s.CreateTimeout > 0 {
		return s.CreateTimeout
	}
	return time.Minute
}

// prepareTimeout bounds the first Create of each of the suite's images,
// which may prepare the image once per Backend: hash a folder (a python
// image is 34,000 files, read from disk when not in the page cache),
// import it into a daemon or a cluster's runtime, pack a boot image.
const prepareTimeout = 10 * time.Minute

// testFirstSandboxes creates one sandbox of each image with prepareTimeout
// and logs how long it took, so that the checks after it, whose creates
// get CreateTimeout, time a prepared image.
func (s *suite) testFirstSandboxes(t *testing.T) {
	images := []sandbox.Image{s.Image}
	if s.DataImage.Name != "" && s.DataImage.Name != s.Image.Name {
		images = append(images, s.DataImage)
	}
	s.checkLeftoversAtEnd(t)
	for _, img := range images {
		start := time.Now()
		inst := CreateWithin(t, max(prepareTimeout, s.createTimeout()), s.Backend, img, Policy(t, nil))
		t.Logf("image %s: first sandbox created in %s, the image's preparation included", img.Name, time.Since(start).Round(time.Millisecond))
		if err := inst.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}
}

// Create starts a sandbox on be that is destroyed when the test ends; it
// fails t if either fails.
func Create(t *testing.T, be sandbox.Backend, image sandbox.Image, p sandbox.Policy) sandbox.Instance {
	t.Helper()
	return CreateWithin(t, time.Minute, be, image, p)
}

// CreateWithin is Create with a bound of d on the creation.
func CreateWithin(t *testing.T, d time.Duration, be sandbox.Backend, image sandbox.Image, p sandbox.Policy) sandbox.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	inst, err := be.Create(ctx, sandbox.Spec{Image: image, Policy: p})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := inst.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return inst
}

// checkLeftoversAtEnd makes t check, once all its sandboxes are destroyed,
// that the backend left nothing behind. Cleanups run last-in first-out,
// so the check registered before the first sandbox runs after them all.
func (s *suite) checkLeftoversAtEnd(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Leftovers == nil || s.checked[t] {
		return
	}
	if s.checked == nil {
		s.checked = map[*testing.T]bool{}
	}
	s.checked[t] = true
	t.Cleanup(func() {
		if left := s.Leftovers(); len(left) > 0 {
			t.Errorf("left behind after destroy: %v", left)
		}
	})
}

// putInput stores a file at /workspace/input/NAME.
func putInput(ctx context.Context, inst sandbox.Instance, name string, r io.Reader) error {
	_, err := inst.Files().Put(ctx, "/workspace/input/"+name, r, 0)
	return err
}

// openOutput opens /workspace/output of a backend whose files are host
// folders.
func openOutput(ctx context.Context, inst sandbox.Instance) (*os.File, error) {
	o, ok := inst.(sandbox.OutputDirOpener)
	if !ok {
		return nil, fmt.Errorf("backend cannot open /workspace/output as a host folder: %w", sandbox.ErrUnsupported)
	}
	return o.OpenOutputDir(ctx)
}

// collectOutput runs /workspace/output through the artifact filter into
// dst, from the host folder where the backend has one, else from its tar
// stream (sandbox.OutputArchiver), as the session does.
func collectOutput(ctx context.Context, inst sandbox.Instance, dst string, p sandbox.ArtifactPolicy) ([]sandbox.Artifact, error) {
	if a, ok := inst.(sandbox.OutputArchiver); ok {
		if _, dir := inst.(sandbox.OutputDirOpener); !dir {
			r, err := a.ArchiveOutput(ctx)
			if err != nil {
				return nil, err
			}
			defer r.Close()
			return artifact.CollectTar(ctx, r, artifact.Destination{Dir: dst}, p)
		}
	}
	dir, err := openOutput(ctx, inst)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return artifact.Collect(ctx, dir, dst, p)
}

// Exec runs a process to its end and fails the test on an infrastructure
// error.
func Exec(t *testing.T, inst sandbox.Instance, req sandbox.ProcessSpec) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := sandbox.Exec(ctx, inst, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Cmd, err)
	}
	return res
}

// sh runs a shell command line.
func sh(t *testing.T, inst sandbox.Instance, script string) sandbox.Result {
	t.Helper()
	return Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"sh", "-c", script}})
}

// check is one line of a probe's report.
type check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail is any JSON value the probe chose to explain itself with.
	Detail json.RawMessage `json:"detail"`
}

// probeScript joins the shared helpers and one probe into one program.
func probeScript(t *testing.T, name string) string {
	t.Helper()
	common, err := probeFS.ReadFile("probes/common.py")
	if err != nil {
		t.Fatal(err)
	}
	body, err := probeFS.ReadFile("probes/" + name + ".py")
	if err != nil {
		t.Fatal(err)
	}
	return string(common) + "\n" + string(body)
}

// probe runs an attack probe inside inst and checks every line it
// reports. It returns the checks by name for extra assertions.
func (s *suite) probe(t *testing.T, inst sandbox.Instance, name string, env map[string]string, args ...string) map[string]check {
	t.Helper()
	cmd := append([]string{"python3", "-c", probeScript(t, name)}, args...)
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: cmd, Env: env})
	return s.checkLines(t, name, res)
}

// checkLines checks every JSON line a probe printed: each attack must have
// been stopped, unless the config says the check does not apply.
func (s *suite) checkLines(t *testing.T, name string, res sandbox.Result) map[string]check {
	t.Helper()
	if res.ExitCode != 0 {
		t.Fatalf("probe %s exited %d (signal %q)\nstdout:\n%s\nstderr:\n%s", name, res.ExitCode, res.Signal, res.Stdout, res.Stderr)
	}
	checks := map[string]check{}
	sc := bufio.NewScanner(strings.NewReader(res.Stdout))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c check
		if err := json.Unmarshal(line, &c); err != nil {
			t.Errorf("probe %s: bad line %q: %v", name, line, err)
			continue
		}
		checks[c.Name] = c
		if why, ok := s.Skip[c.Name]; ok {
			t.Logf("SKIP %s: does not apply to backend %s: %s (got ok=%v, %s)", c.Name, s.Backend.Name(), why, c.OK, string(c.Detail))
			continue
		}
		if !c.OK {
			t.Errorf("ATTACK NOT STOPPED: %s: %s", c.Name, string(c.Detail))
		} else {
			t.Logf("stopped: %s (%s)", c.Name, string(c.Detail))
		}
	}
	if len(checks) == 0 {
		t.Fatalf("probe %s reported nothing; stderr:\n%s", name, res.Stderr)
	}
	return checks
}

// StartHolder starts spec (made KeepAlive) in inst: a process that prints
// one line when it is ready and then keeps running. It returns that line,
// and kills the process when the test ends; t fails if no line comes
// within wait.
func StartHolder(t *testing.T, inst sandbox.Instance, spec sandbox.ProcessSpec, wait time.Duration) string {
	t.Helper()
	pr, pw := io.Pipe()
	spec.Stdout, spec.KeepAlive = pw, true
	p, err := inst.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("start %q: %v", spec.Cmd, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Signal(ctx, syscall.SIGKILL)
		_, _ = p.Wait(ctx)
		pw.Close()
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(pr).ReadString('\n')
		line <- strings.TrimSpace(l)
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case l := <-line:
		return l
	case <-time.After(wait):
		t.Fatalf("%q printed nothing within %v", spec.Cmd, wait)
		return ""
	}
}
