package docker_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

func TestMain(m *testing.M) {
	if childMode() {
		return
	}
	os.Exit(backendtest.Main(m, leftovers))
}

// stateDir is the backend's default folder for the sandboxes' folders.
const stateDir = "/run/airlock/docker"

// leftovers lists the containers and folders of this test process's
// sandboxes: those labelled, or named, after it as owner.
func leftovers() []string {
	out := containertest.OwnFolders(stateDir)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return out
	}
	defer cli.Close()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "airlock.owner="+hostdir.Owner()))})
	if err != nil {
		return out
	}
	for _, c := range list {
		out = append(out, "container "+c.ID[:12]+" ("+c.State+")")
	}
	return out
}

// backends remembers every backend a test made, to close their
// connections to the daemon at the end.
type backends struct {
	mu   sync.Mutex
	list []*docker.Backend
}

func (bs *backends) new(opts docker.Options) *docker.Backend {
	b := docker.New(opts)
	bs.mu.Lock()
	bs.list = append(bs.list, b)
	bs.mu.Unlock()
	return b
}

func (bs *backends) close() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.list {
		_ = b.Close()
	}
}

// skips are the suite's checks that the docker backend answers otherwise,
// on either runtime, and why.
var skips = containertest.Merge(containertest.ImageSkips, containertest.ProfileSkips, map[string]string{
	"landlock": containertest.NoLandlock,
	"/dev is minimal": "Docker creates /dev/tty (c 5:0) in every container and no API option removes it; " +
		"opening it needs a controlling terminal, which no exec has",
	"open /dev/tty": "Docker creates /dev/tty in every container; without a controlling terminal open() fails with ENXIO",
})

// runcENOSYS are the privilege checks of calls newer than every call the
// container profile names: runc's filter answers them ENOSYS, its stub
// for calls its libseccomp does not know, so they never reach the kernel.
var runcENOSYS = []string{"open_tree_attr of / (no clone)", "statmount", "listmount", "listns", "lsm_set_self_attr"}

// runcSkips are the checks that differ with runc.
var runcSkips = map[string]string{
	"lower /proc/self/oom_score_adj": "with no Landlock to refuse the write, a command may lower its score to the floor, and " +
		"raising the floor to 1000 needs CAP_SYS_RESOURCE on the host, which this machine lacks (TestOOMScoreAdj)",
	"every mount is nosuid": "Docker mounts the image's root, /etc/hosts, /etc/hostname, /etc/resolv.conf and its init without nosuid, " +
		"and no API option changes that; no_new_privs makes setuid bits inert and built images have none (see 'setuid binaries gain nothing')",
	"exec of a memfd (flags 0) via execveat":                   runcMemfdExec,
	"exec of a memfd (flags 0) via execve /proc/self/fd/N":     runcMemfdExec,
	"exec of a memfd (MFD_CLOEXEC) via execveat":               runcMemfdExec,
	"exec of a memfd (MFD_CLOEXEC) via execve /proc/self/fd/N": runcMemfdExec,
	"x32 getpid": "the container profile lets x32 calls through under the x86_64 allowlist (seccompprofile.Profile), and " +
		"the kernel, which has no x32 ABI here, answers ENOSYS",
}

// runcMemfdExec is why a binary written to a memfd runs under runc (the
// README says so).
const runcMemfdExec = "with no Landlock, and vm.memfd_noexec per pid namespace but no sysctl Docker can set, a binary " +
	"written into a memfd made without MFD_EXEC runs (README, The limits of isolation); MFD_EXEC itself is refused"

func runSuite(t *testing.T, runtimeName string, extra map[string]string) {
	var bs backends
	defer bs.close()
	be := bs.new(docker.Options{Runtime: runtimeName})
	requireFull(t, be, runtimeName)
	data, err := testimage.Resolve()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
	cfg := backendtest.Config{
		Backend:     be,
		Image:       folderImage(t),
		DataImage:   data,
		Skip:        containertest.Merge(skips, extra),
		Leftovers:   leftovers,
		PidsReserve: docker.KeeperTasks,
	}
	if runtimeName == docker.RuntimeRunc {
		cfg.StdioDir = hostdir.IOTarget
		cfg.FilterENOSYS = runcENOSYS
	}
	backendtest.Run(t, cfg)
}

// requireFull skips t (fails it under CI) unless the daemon runs
// runtimeName in its full form.
func requireFull(t *testing.T, be *docker.Backend, runtimeName string) {
	t.Helper()
	ctx := context.Background()
	testenv.Require(t, "docker with runtime "+runtimeName+" (bash .ci/lib/docker.sh start)", be.Probe(ctx))
	if weak := be.Capabilities(ctx).Weakened(); len(weak) > 0 {
		testenv.Require(t, "the runtime's full form", errors.New(strings.Join(weak, "; ")))
	}
}

// folderImage is the python image's root as a folder image (no image
// environment, which the suite's environment check does not expect).
func folderImage(t *testing.T) sandbox.Image {
	t.Helper()
	img, err := image.Resolve(nil, testimage.Folder(t))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestSuiteRunc(t *testing.T) {
	runSuite(t, docker.RuntimeRunc, runcSkips)
}

// runscSkips add to gVisor's what differs under Docker.
var runscSkips = containertest.Merge(containertest.GVisorSkips, map[string]string{
	"egress allowlist": "docker with runsc has no egress: Docker cannot pass runsc a socket per container (README, Backends)",
	"only lo exists": "under Docker's --network=none, gVisor's netstack (runsc's default network mode) has no interface at all, " +
		"not even lo; every connection fails, as the other network checks show",
})

func TestSuiteRunsc(t *testing.T) {
	runSuite(t, docker.RuntimeRunsc, runscSkips)
}
