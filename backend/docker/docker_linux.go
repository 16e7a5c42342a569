package docker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/egress"
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
// keeper, see keeperCmd), which commands cannot signal.
const (
	sandboxUser = "1000:1000"
	sandboxUID  = 1000
	sandboxGID  = 1000
	keeperUser  = "65534:65534"
)

// KeeperTasks is added to the pids cap for the container's own process,
// its pid 1. The command gets the cap it asked for.
const KeeperTasks = 1

// Backend creates Docker sandboxes.
type Backend struct {
	opts    Options
	cliMu   sync.Mutex
	cli     *client.Client
	cleaned sync.Once
	images  imageCache
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a docker backend. Nothing is contacted until first use.
func New(opts Options) *Backend {
	if opts.Runtime == "" {
		opts.Runtime = RuntimeRunc
	}
	if opts.StateDir == "" {
		opts.StateDir = "/run/airlock/docker"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts}
}

// Name is "docker".
func (b *Backend) Name() string { return "docker" }

// Runtime is the OCI runtime the containers run with.
func (b *Backend) Runtime() string { return b.opts.Runtime }

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
	version  string
	cgroups  string
	userns   bool
	runtimes []string
	// weakened lists the layers weaker than their full form with this
	// daemon's configuration of the runtime.
	weakened []string
}

func (b *Backend) daemonInfo(ctx context.Context) (daemon, error) {
	unsupported := func(format string, a ...any) (daemon, error) {
		return daemon{}, fmt.Errorf("docker backend: "+format+": %w", append(a, sandbox.ErrUnsupported)...)
	}
	if os.Geteuid() != 0 {
		return unsupported("needs root, to mount the sandboxes' folders")
	}
	cli, err := b.client()
	if err != nil {
		return unsupported("%v", err)
	}
	if h := cli.DaemonHost(); !strings.HasPrefix(h, "unix://") {
		return unsupported("daemon at %s: the daemon must run on this host (a unix socket)", h)
	}
	info, err := cli.Info(ctx)
	if err != nil {
		return unsupported("%v", err)
	}
	d := daemon{version: info.ServerVersion, cgroups: "cgroup v" + info.CgroupVersion + ", driver " + info.CgroupDriver}
	for name := range info.Runtimes {
		d.runtimes = append(d.runtimes, name)
	}
	for _, o := range info.SecurityOptions {
		d.userns = d.userns || strings.Contains(o, "name=userns")
	}
	if info.OSType != "linux" {
		return unsupported("daemon runs %s containers, not linux", info.OSType)
	}
	rt, ok := info.Runtimes[b.opts.Runtime]
	if !ok {
		return unsupported("daemon has no runtime %q (it has %s)", b.opts.Runtime, strings.Join(d.runtimes, ", "))
	}
	if b.opts.Runtime == RuntimeRunsc && !slices.Contains(rt.Args, "--oci-seccomp") {
		d.weakened = append(d.weakened, "privileges: gVisor does not apply the seccomp profile inside the sandbox "+
			"(dockerd's runsc runtime lacks \"runtimeArgs\": [\"--oci-seccomp\"]); system calls still reach only the sentry")
	}
	if d.userns {
		return unsupported("dockerd runs with --userns-remap, which this backend does not support yet")
	}
	return d, nil
}

// Weakened lists the layers that run weaker than their full form with
// this daemon; Results carry the same list.
func (b *Backend) Weakened(ctx context.Context) ([]string, error) {
	d, err := b.daemonInfo(ctx)
	return d.weakened, err
}

// Capabilities reports each layer's mechanism with this daemon.
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
	m("runtime", "docker daemon", sandbox.Full, "Docker "+d.version+", runtime "+b.opts.Runtime)
	if b.opts.Runtime == RuntimeRunsc {
		m("privileges", "user-space kernel", sandbox.Full, "gVisor: system calls are served by the sentry, not the host kernel")
		for _, w := range d.weakened {
			m("privileges", "seccomp inside gVisor", sandbox.Weaker, w)
		}
	} else {
		m("privileges", "host kernel", sandbox.Weaker, "runc: the code talks to the host's kernel, as with native")
	}
	m("filesystem", "read-only root", sandbox.Full, "--read-only; /tmp, /workspace/output, /dev/shm on one tmpfs of the disk cap")
	m("network", "no network", sandbox.Full, "--network=none: only lo")
	m("privileges", "capabilities", sandbox.Full, "--cap-drop=ALL, no-new-privileges, uid 1000")
	m("privileges", "seccomp", sandbox.Full, "Docker's default profile without ptrace, process_vm_*, kcmp, name_to_handle_at, modify_ldt, i386 calls; unix, inet and netlink-route sockets only")
	m("privileges", "user mapping", sandbox.Weaker, "no user namespace: uid 1000 inside is uid 1000 on the host, uid 0 would be host root (nothing runs as 0 inside)")
	m("resources", "cgroups", sandbox.Full, "memory without swap, CPU quota, pids ("+d.cgroups+")")
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
// the container, and the egress proxy when the policy allows hosts.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	pol, err := spec.Policy.Normalize()
	if err != nil {
		return nil, err
	}
	id, err := hostdir.PickID(spec.ID)
	if err != nil {
		return nil, err
	}
	if pol.Network.Enabled() && b.opts.Runtime == RuntimeRunsc {
		return nil, fmt.Errorf("egress with runtime runsc: gVisor's network stack lives inside the sandbox, out of the host's reach; "+
			"the gvisor backend bridges it with a unix socket (runsc --host-uds=open), which Docker cannot ask runsc for: %w", sandbox.ErrUnsupported)
	}
	d, err := b.daemonInfo(ctx)
	if err != nil {
		return nil, err
	}
	if pol.Strict && len(d.weakened) > 0 {
		return nil, fmt.Errorf("strict policy, but with this daemon: %s: %w", strings.Join(d.weakened, "; "), sandbox.ErrUnsupported)
	}
	cli, _ := b.client()
	src, ref, err := b.image(ctx, cli, spec.Image)
	if err != nil {
		return nil, err
	}
	b.cleaned.Do(func() { b.CleanupStale(ctx) })
	inst := &instance{id: id, backend: b, cli: cli, policy: pol, weakened: d.weakened, imageEnv: src.env}
	if err := inst.start(ctx, ref); err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	b.opts.Logger.Debug("sandbox created", "id", id, "image", spec.Image, "runtime", b.opts.Runtime)
	return inst, nil
}

// newProxy builds the egress proxy of a sandbox whose policy allows hosts.
func (b *Backend) newProxy(id string, pol sandbox.Policy) (*egress.Proxy, error) {
	return egress.New(egress.Options{Policy: pol.Network, Logger: b.opts.Logger.With("sandbox", id), Hooks: b.opts.EgressHooks})
}

// notFound tells whether err is the daemon's "no such object".
func notFound(err error) bool { return err != nil && cerrdefs.IsNotFound(err) }
