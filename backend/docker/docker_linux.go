package docker

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/watchdog"
	"github.com/airlock-sandbox/airlock/sandbox"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Labels on every container the backend creates.
const (
	labelSandbox = "airlock.sandbox"
	labelOwner   = "airlock.owner"
)

// The sandbox user, and the user of the container's own pid 1 (the
// keeper, command.KeeperArgs), which commands cannot signal; as the container
// sees them.
const (
	sandboxUser = "1000:1000"
	sandboxUID  = 1000
	keeperUser  = "65534:65534"
	keeperUID   = 65534
	// helperUser runs the root helper under runsc (see runscProcess).
	helperUser = "0:0"
)

// KeeperTasks is added to the pids cap for the container's own processes,
// its pid 1. The command gets the cap it asked for.
const KeeperTasks = 2

// Backend creates Docker sandboxes.
type Backend struct {
	opts    Options
	cliMu   sync.Mutex
	cli     *client.Client
	cleaned sync.Once
	images  imageCache

	infoMu sync.Mutex
	info   *daemon // the daemon as last probed successfully
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a docker backend. Nothing is contacted until first use.
func New(opts Options) *Backend {
	if opts.StateDir == "" {
		opts.StateDir = "/run/airlock-docker"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts}
}

// Name is "docker".
func (b *Backend) Name() string { return "docker" }

// Runtime is the OCI runtime the containers run with: the one asked for,
// else the one the daemon gives (runsc where registered); "" while the
// daemon cannot be reached.
func (b *Backend) Runtime(ctx context.Context) string {
	d, err := b.daemonInfo(ctx)
	if err != nil {
		return b.opts.Runtime
	}
	return d.runtime
}

// Features says what sandboxes of the backend's runtime can do: with
// runsc, no egress (Docker cannot hand runsc a socket per container) and
// no survival of an OOM (the host ends gVisor's sentry, the whole
// sandbox).
func (b *Backend) Features() sandbox.Features {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := sandbox.Features{ConcurrentProcesses: true, KeepAlive: true, Signals: true, Files: sandbox.FilesHostDir}
	if b.Runtime(ctx) == RuntimeRunsc {
		f.OwnKernel = true
	} else {
		f.Egress, f.SurvivesOOM = true, true
	}
	return f
}

// client connects on first use.
func (b *Backend) client() (*client.Client, error) {
	b.cliMu.Lock()
	defer b.cliMu.Unlock()
	if b.cli != nil {
		return b.cli, nil
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if b.opts.Host != "" {
		opts = append(opts, client.WithHost(b.opts.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, err
	}
	b.cli = cli
	return cli, nil
}

// Close drops the idle connections to the daemon. Sandboxes stay as they
// are; the backend reconnects when used again.
func (b *Backend) Close() error {
	b.cliMu.Lock()
	defer b.cliMu.Unlock()
	if b.cli == nil {
		return nil
	}
	return b.cli.Close()
}

// Probe fails when the daemon cannot run sandboxes of this backend here.
func (b *Backend) Probe(ctx context.Context) error {
	_, err := b.daemonInfo(ctx)
	return err
}

// daemon is what the backend needs to know about the daemon.
type daemon struct {
	version string
	socket  string // the daemon's unix socket, for watchdogs
	cgroups string
	// runtime is the runtime the sandboxes run with.
	runtime string
	// ociSeccomp: runsc is registered with --oci-seccomp, so that it
	// applies the container's seccomp profile inside the sandbox.
	ociSeccomp bool
	// remap is the daemon's user namespace remapping; nil without one.
	remap *idMap
}

// idMap is where a remapped daemon maps its containers' ids: the host uid
// and gid of the container's 0, and how many ids follow.
type idMap struct {
	uid, gid, size int
}

// hostUID is the host uid of container uid id (the same without remap).
func (d *daemon) hostUID(id int) int {
	if d.remap == nil {
		return id
	}
	return d.remap.uid + id
}

// hostGID is the host gid of container gid id.
func (d *daemon) hostGID(id int) int {
	if d.remap == nil {
		return id
	}
	return d.remap.gid + id
}

// rootGID is the host group of the remapped root, 0 without remap.
func (d *daemon) rootGID() int {
	if d.remap == nil {
		return 0
	}
	return d.remap.gid
}

// errRemap says how to give runc what it needs.
const errRemap = "runtime runc needs a daemon that remaps user namespaces, so that no sandbox process runs as a host account: " +
	"start dockerd with --userns-remap=default (or set \"userns-remap\": \"default\" in /etc/docker/daemon.json and restart it), " +
	"or run with runtime runsc (register gVisor's runsc with the daemon)"

func (b *Backend) daemonInfo(ctx context.Context) (*daemon, error) {
	unsupported := func(format string, a ...any) (*daemon, error) {
		return nil, fmt.Errorf("docker backend: "+format+": %w", append(a, sandbox.ErrUnsupported)...)
	}
	if os.Geteuid() != 0 {
		return unsupported("needs root, to mount the sandboxes' folders")
	}
	cli, err := b.client()
	if err != nil {
		return unsupported("%v", err)
	}
	socket := watchdog.SocketPath(cli.DaemonHost())
	if socket == "" {
		return unsupported("daemon at %s: the daemon must run on this host (a unix socket)", cli.DaemonHost())
	}
	info, err := cli.Info(ctx)
	if err != nil {
		return unsupported("%v", err)
	}
	if info.OSType != "linux" {
		return unsupported("daemon runs %s containers, not linux", info.OSType)
	}
	d := &daemon{version: info.ServerVersion, socket: socket, cgroups: "cgroup v" + info.CgroupVersion + ", driver " + info.CgroupDriver}
	var names []string
	for name := range info.Runtimes {
		names = append(names, name)
	}
	slices.Sort(names)
	d.runtime = b.opts.Runtime
	if d.runtime == "" {
		d.runtime = RuntimeRunc
		if _, ok := info.Runtimes[RuntimeRunsc]; ok {
			d.runtime = RuntimeRunsc
		}
	}
	rt, ok := info.Runtimes[d.runtime]
	if !ok {
		return unsupported("daemon has no runtime %q (it has %s)", d.runtime, strings.Join(names, ", "))
	}
	d.ociSeccomp = slices.Contains(rt.Args, "--oci-seccomp")
	for _, o := range info.SecurityOptions {
		if strings.Contains(o, "name=userns") {
			if d.remap, err = remapOf(info.DockerRootDir); err != nil {
				return unsupported("%v", err)
			}
		}
	}
	if d.runtime == RuntimeRunc && d.remap == nil {
		return unsupported("%s", errRemap)
	}
	b.infoMu.Lock()
	b.info = d
	b.infoMu.Unlock()
	return d, nil
}

// remapOf finds a remapped daemon's id map: its root folder is named
// after the host ids of the containers' root ("/var/lib/docker/UID.GID"),
// and /etc/subuid and /etc/subgid give the ranges that start there.
func remapOf(rootDir string) (*idMap, error) {
	u, g, ok := strings.Cut(filepath.Base(rootDir), ".")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("the daemon remaps user namespaces, but its root folder %s does not name the remapped ids", rootDir)
	}
	usize, err := subIDRange("/etc/subuid", uid)
	if err != nil {
		return nil, err
	}
	gsize, err := subIDRange("/etc/subgid", gid)
	if err != nil {
		return nil, err
	}
	m := &idMap{uid: uid, gid: gid, size: min(usize, gsize)}
	if m.size <= keeperUID {
		return nil, fmt.Errorf("the daemon's remapped range (%d ids from %d) cannot hold uid %d", m.size, uid, keeperUID)
	}
	return m, nil
}

// subIDRange reads the size of the range that starts at start in a
// subordinate id file ("name:start:count" lines).
func subIDRange(file string, start int) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, fmt.Errorf("the daemon's remapped ids: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 {
			continue
		}
		s, err1 := strconv.Atoi(parts[1])
		n, err2 := strconv.Atoi(parts[2])
		if err1 == nil && err2 == nil && s == start {
			return n, nil
		}
	}
	return 0, fmt.Errorf("the daemon's remapped ids: no range starts at %d in %s", start, file)
}

// Capabilities reports each layer's mechanism with this daemon.
// Result.Weakened and --strict come from it.
func (b *Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	caps := sandbox.Capabilities{Backend: b.Name()}
	d, err := b.daemonInfo(ctx)
	if err != nil {
		caps.Mechanisms = []sandbox.Mechanism{{Layer: "runtime", Name: "docker daemon", Strength: sandbox.Missing, Detail: err.Error()}}
		return caps
	}
	m := func(layer, name string, s sandbox.Strength, detail string) {
		caps.Mechanisms = append(caps.Mechanisms, sandbox.Mechanism{Layer: layer, Name: name, Strength: s, Detail: detail})
	}
	full := func(ok bool) sandbox.Strength {
		if ok {
			return sandbox.Full
		}
		return sandbox.Weaker
	}
	m("runtime", "docker daemon", sandbox.Full, "Docker "+d.version+", runtime "+d.runtime)
	runsc := d.runtime == RuntimeRunsc
	if runsc {
		m("privileges", "user-space kernel", sandbox.Full, "gVisor: system calls are served by the sentry, not the host kernel")
		detail := "runsc --oci-seccomp: the container's profile applies inside the sandbox"
		if !d.ociSeccomp {
			detail = "dockerd's runsc runtime lacks \"runtimeArgs\": [\"--oci-seccomp\"]: the profile does not apply inside gVisor; system calls still reach only the sentry"
		}
		m("privileges", "seccomp inside gVisor", full(d.ociSeccomp), detail)
	} else {
		m("privileges", "seccomp", sandbox.Full, "Docker's default profile without ptrace, process_vm_*, kcmp, name_to_handle_at, modify_ldt, i386 calls; unix, inet and netlink-route sockets only")
	}
	m("filesystem", "read-only root", sandbox.Full, "--read-only; /tmp, /workspace/output, /dev/shm on one tmpfs of the disk cap")
	if d.remap != nil {
		m("filesystem", "noexec binds", sandbox.Full, "the remapped daemon keeps the host folders' nosuid, nodev and noexec on every bind, read-only ones too")
		m("privileges", "user mapping", sandbox.Full, fmt.Sprintf("--userns-remap: uid 0 and 1000 inside are host uids %d and %d, no host account", d.hostUID(0), d.hostUID(sandboxUID)))
	} else {
		m("filesystem", "noexec binds", sandbox.Weaker, "without --userns-remap, Docker passes runsc the binds without noexec and nosuid: a binary written to /tmp can run inside gVisor")
		m("privileges", "user mapping", sandbox.Weaker, "without --userns-remap, what the code writes is owned by host uid 1000 (the code itself runs on gVisor's kernel)")
	}
	m("network", "no network", sandbox.Full, "--network=none: only lo")
	m("privileges", "capabilities", sandbox.Full, "--cap-drop=ALL, no-new-privileges, uid 1000")
	m("resources", "cgroups", sandbox.Full, "memory without swap, CPU quota, pids ("+d.cgroups+")")
	switch {
	case runsc:
		m("resources", "socket buffers", sandbox.Full, "gVisor's network stack keeps socket buffers in the sentry's memory, inside the memory cap")
	case strings.HasPrefix(d.cgroups, "cgroup v2"):
		m("resources", "socket buffers", sandbox.Full, "cgroup v2 counts them in the memory cap")
	default:
		ok := tcpLimitAvailable()
		detail := "cgroup v1: TCP buffers have a cap of their own, a quarter of the memory cap (memory.kmem.tcp.limit_in_bytes)"
		if !ok {
			detail = "cgroup v1 without memory.kmem.tcp.limit_in_bytes: socket buffers are not counted"
		}
		m("resources", "socket buffers", full(ok), detail)
	}
	if runsc {
		m("lifecycle", "sweep", sandbox.Full, "a root helper inside gVisor kills what a process left, sparing the trees of live processes")
	} else {
		m("lifecycle", "sweep", sandbox.Full, "each process in a cgroup of its own under the container's, killed whole when it ends")
	}
	m("lifecycle", "watchdog", sandbox.Full, "a host process per sandbox removes its container when airlock dies")
	return caps
}

// CleanupStale removes the containers and folders of airlock processes
// that died without removing them, and returns what it removed.
func (b *Backend) CleanupStale(ctx context.Context) []string {
	var removed []string
	cli, err := b.client()
	if err != nil {
		return nil
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelOwner))})
	if err != nil {
		b.opts.Logger.Warn("list leftover containers", "err", err)
	}
	for _, c := range list {
		if hostdir.OwnerAlive(c.Labels[labelOwner]) {
			continue
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			b.opts.Logger.Warn("remove leftover container", "id", c.ID, "err", err)
			continue
		}
		removed = append(removed, "container "+c.ID)
	}
	for _, d := range hostdir.Stale(b.opts.StateDir, nil) {
		removed = append(removed, "folder "+d)
	}
	for _, r := range removed {
		b.opts.Logger.Info("removed leftover", "what", r)
	}
	return removed
}

// Create starts a sandbox: the image imported if needed, the host folders,
// the watchdog, and the container.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	pol, err := spec.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	id, err := hostdir.PickID(spec.ID)
	if err != nil {
		return nil, err
	}
	d, err := b.daemonInfo(ctx)
	if err != nil {
		return nil, err
	}
	if pol.Network.Enabled() && d.runtime == RuntimeRunsc {
		return nil, fmt.Errorf("egress with runtime runsc: gVisor's network stack lives inside the sandbox, out of the host's reach; "+
			"the gvisor backend bridges it with a unix socket (runsc --host-uds=open), which Docker cannot ask runsc for: %w", sandbox.ErrUnsupported)
	}
	weak := b.Capabilities(ctx).Weakened()
	if err := pol.RefuseWeak("this daemon", weak); err != nil {
		return nil, err
	}
	cli, err := b.client()
	if err != nil {
		return nil, err
	}
	ref, err := b.image(ctx, cli, spec.Image)
	if err != nil {
		return nil, err
	}
	b.cleaned.Do(func() { b.CleanupStale(ctx) })
	inst := newInstance(b, cli, d, id, pol, weak, spec.Image.Env)
	if err := inst.start(ctx, ref); err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	b.opts.Logger.Debug("sandbox created", "id", id, "image", spec.Image.Name, "runtime", d.runtime)
	return inst, nil
}

// notFound tells whether err is the daemon's "no such object".
func notFound(err error) bool { return err != nil && cerrdefs.IsNotFound(err) }
