package containerbench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/gvisor"
	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// pair times a run of airlock and a run of its baseline alternately, b.N
// times each, so that both see the same machine; it reports the median
// of each in ms and their ratio.
func pair(b *testing.B, airlock, baseline func() error) {
	b.Helper()
	var a, base []time.Duration
	for b.Loop() {
		for _, r := range []struct {
			fn  func() error
			out *[]time.Duration
		}{{airlock, &a}, {baseline, &base}} {
			t0 := time.Now()
			if err := r.fn(); err != nil {
				b.Fatal(err)
			}
			*r.out = append(*r.out, time.Since(t0))
		}
	}
	ma, mb := median(a), median(base)
	b.ReportMetric(ma, "airlock-ms")
	b.ReportMetric(mb, "baseline-ms")
	b.ReportMetric(ma/mb, "ratio")
}

func median(d []time.Duration) float64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// sandboxRun is one whole run: create, run the command, destroy.
func sandboxRun(b *testing.B, be sandbox.Backend, image sandbox.Image, cmd ...string) func() error {
	p, err := sandbox.Policy{}.Normalize()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func() error {
		inst, err := be.Create(ctx, sandbox.Spec{Image: image, Policy: p})
		if err != nil {
			return err
		}
		res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: cmd})
		if derr := inst.Destroy(ctx); err == nil {
			err = derr
		}
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%v exited %d: %s", cmd, res.ExitCode, res.Stderr)
		}
		return err
	}
}

func hostRun(name string, args ...string) func() error {
	return func() error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, out)
		}
		return nil
	}
}

// dockerCLI is the docker client matching the daemon: Debian's, where it
// is installed.
func dockerCLI(b *testing.B) string {
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		return "/usr/bin/docker"
	}
	p, err := exec.LookPath("docker")
	testenv.Require(b, "the docker client", err)
	return p
}

// dockerBackend returns the docker backend on a runtime, skipping where
// the daemon cannot run it in full.
func dockerBackend(b *testing.B, runtimeName string) (*docker.Backend, sandbox.Image, string) {
	img := dataImage(b)
	be := docker.New(docker.Options{Runtime: runtimeName})
	b.Cleanup(func() { be.Close() })
	testenv.Require(b, "docker with runtime "+runtimeName+" (bash .ci/lib/docker.sh start)", be.Probe(context.Background()))
	ref := "airlock/rootfs:" + strings.TrimPrefix(img.Digest, "sha256:")[:12]
	return be, img, ref
}

// dataImage is the built python image, or skips b.
func dataImage(b *testing.B) sandbox.Image {
	img, err := testimage.Resolve()
	testenv.Require(b, "the python image (bash .ci/lib/image.sh)", err)
	return img
}

// dockerRunArgs are the design's hardened flags, for plain docker run.
func dockerRunArgs(runtimeName, ref string) []string {
	return []string{"run", "--rm", "--runtime=" + runtimeName, "--network=none", "--read-only", "--cap-drop=ALL",
		"--security-opt=no-new-privileges", "--memory=512m", "--memory-swap=512m", "--cpus=1", "--pids-limit=129",
		"--user=1000:1000", "--log-driver=none", ref, "/bin/true"}
}

func benchDocker(b *testing.B, runtimeName string) {
	be, img, ref := dockerBackend(b, runtimeName)
	run := sandboxRun(b, be, img, "/bin/true")
	if err := run(); err != nil { // imports the image if needed
		b.Fatal(err)
	}
	cli := dockerCLI(b)
	pair(b, run, hostRun(cli, dockerRunArgs(runtimeName, ref)...))
}

// BenchmarkDockerRunc: create + /bin/true + destroy on docker with runc,
// beside docker run --rm with the same flags.
func BenchmarkDockerRunc(b *testing.B) { benchDocker(b, docker.RuntimeRunc) }

// BenchmarkDockerRunsc: the same with runtime runsc.
func BenchmarkDockerRunsc(b *testing.B) { benchDocker(b, docker.RuntimeRunsc) }

// BenchmarkGVisor: create + /bin/true + destroy on gvisor with the host
// image, beside runsc do, which also runs the host's root (under an
// overlay) with no network.
func BenchmarkGVisor(b *testing.B) {
	testenv.Require(b, "root, for the gvisor backend's full form", testenv.Root())
	runsc := containertest.Runsc(b)
	be := gvisor.New(gvisor.Options{Runsc: runsc})
	pair(b, sandboxRun(b, be, sandbox.HostImage(), "/bin/true"), hostRun(runsc, "--network=none", "do", "/bin/true"))
}

// BenchmarkGVisorBundle: the gvisor backend beside runsc run of an
// equivalent bundle, the backend's own (cgroups, mounts, seccomp), with
// /bin/true as the process and fresh tmpfs for the writable folders.
func BenchmarkGVisorBundle(b *testing.B) {
	testenv.Require(b, "root, for the gvisor backend's full form", testenv.Root())
	runsc := containertest.Runsc(b)
	be := gvisor.New(gvisor.Options{Runsc: runsc})
	dir := equivalentBundle(b, be)
	state := filepath.Join(dir, "state")
	n := 0
	baseline := func() error {
		n++
		cid := "bench-" + strconv.Itoa(n)
		if err := hostRun(runsc, "--root", state, "--network=none", "--oci-seccomp", "run", "--bundle", dir, cid)(); err != nil {
			return err
		}
		return hostRun(runsc, "--root", state, "delete", "--force", cid)()
	}
	b.Cleanup(func() {
		_ = exec.Command("umount", filepath.Join(state, "null-netns")).Run()
		cgstat.RemoveEmpty("airlock-bench")
	})
	pair(b, sandboxRun(b, be, sandbox.HostImage(), "/bin/true"), baseline)
}

// equivalentBundle copies the bundle of a host-image sandbox of be into a
// folder of the test, runs /bin/true as the sandbox user in it, and puts
// tmpfs where the sandbox's host folders were.
func equivalentBundle(b *testing.B, be *gvisor.Backend) string {
	p, _ := sandbox.Policy{}.Normalize()
	inst, err := be.Create(context.Background(), sandbox.Spec{Image: sandbox.HostImage(), Policy: p})
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	dst := b.TempDir()
	src := filepath.Join("/run/airlock/gvisor", hostdir.Owner()+"-"+inst.ID(), "bundle")
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		b.Fatalf("copy the bundle: %v %s", err, out)
	}
	var spec specs.Spec
	raw, err := os.ReadFile(filepath.Join(dst, "config.json"))
	if err == nil {
		err = json.Unmarshal(raw, &spec)
	}
	if err != nil {
		b.Fatal(err)
	}
	spec.Root.Path = filepath.Join(dst, "rootfs")
	spec.Process.Args = []string{"/bin/true"}
	spec.Process.User = specs.User{UID: 1000, GID: 1000}
	spec.Linux.CgroupsPath = "/airlock-bench/" + filepath.Base(dst)
	for k, m := range spec.Mounts {
		if m.Type == "bind" && strings.HasPrefix(m.Source, "/run/airlock/") {
			spec.Mounts[k] = specs.Mount{Destination: m.Destination, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec"}}
		}
	}
	raw, err = json.Marshal(&spec)
	if err == nil {
		err = os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o600)
	}
	if err != nil {
		b.Fatal(err)
	}
	return dst
}

// BenchmarkIdleMemory reports the resident memory of one idle sandbox of
// each backend: the processes of the container's cgroup and its
// containerd shim (docker), the sentry and the gofer (gvisor), or init
// (native).
func BenchmarkIdleMemory(b *testing.B) {
	p, _ := sandbox.Policy{}.Normalize()
	measure := func(b *testing.B, be sandbox.Backend, image sandbox.Image, rss func(id string) (int64, error)) {
		var total int64
		for b.Loop() {
			inst, err := be.Create(context.Background(), sandbox.Spec{Image: image, Policy: p})
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			n, err := rss(inst.ID())
			if derr := inst.Destroy(context.Background()); err == nil {
				err = derr
			}
			if err != nil {
				b.Fatal(err)
			}
			total += n
		}
		b.ReportMetric(float64(total)/float64(b.N)/(1<<20), "idle-MiB")
	}
	for _, rt := range []string{docker.RuntimeRunc, docker.RuntimeRunsc} {
		b.Run("docker-"+rt, func(b *testing.B) {
			be, img, _ := dockerBackend(b, rt)
			measure(b, be, img, dockerRSS)
		})
	}
	b.Run("gvisor-host", func(b *testing.B) {
		be := gvisor.New(gvisor.Options{Runsc: containertest.Runsc(b)})
		measure(b, be, sandbox.HostImage(), gvisorRSS)
	})
	b.Run("native-host", func(b *testing.B) {
		measure(b, native.New(native.Options{}), sandbox.HostImage(), nativeRSS)
	})
}

// nativeRSS adds up the processes in the cgroups of this process's native
// sandboxes (airlock/OWNER-…; their names do not carry the sandbox id, and
// one sandbox lives at a time here): its init, when idle.
func nativeRSS(id string) (int64, error) {
	var pids []string
	for _, p := range procs() {
		if strings.Contains(p.cgroup, ":/airlock/"+hostdir.Owner()+"-") {
			pids = append(pids, p.pid)
		}
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("no process in the cgroup of sandbox %s", id)
	}
	return rss(pids)
}

// dockerRSS adds up the containerd shim of the sandbox's container and
// the processes of the container's cgroup.
func dockerRSS(id string) (int64, error) {
	cid := containerID(id)
	if cid == "" {
		return 0, fmt.Errorf("no container for sandbox %s", id)
	}
	var pids []string
	for _, p := range procs() {
		if strings.Contains(p.cmdline, "containerd-shim") && strings.Contains(p.cmdline, cid) {
			pids = append(pids, p.pid)
		}
		if strings.Contains(p.cgroup, cid) {
			pids = append(pids, p.pid)
		}
	}
	return rss(pids)
}

// gvisorRSS adds up the sentry and the gofer, whose command lines name
// the sandbox's runsc state folder.
func gvisorRSS(id string) (int64, error) {
	root := "--root=" + filepath.Join("/run/airlock/gvisor", hostdir.Owner()+"-"+id, "runsc")
	var pids []string
	for _, p := range procs() {
		if strings.Contains(p.cmdline, root+" ") {
			pids = append(pids, p.pid)
		}
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("no process serves sandbox %s", id)
	}
	return rss(pids)
}

type proc struct{ pid, cmdline, cgroup string }

func procs() []proc {
	var out []proc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		out = append(out, proc{e.Name(), strings.ReplaceAll(string(cmd), "\x00", " "), string(cg)})
	}
	return out
}

// rss adds up VmRSS of the processes.
func rss(pids []string) (int64, error) {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	return total, nil
}

// containerID finds the container of a sandbox by its label.
func containerID(id string) string {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return ""
	}
	defer cli.Close()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", "airlock.sandbox="+id))})
	if err != nil || len(list) != 1 {
		return ""
	}
	return list[0].ID
}
