package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/netns"
	"github.com/airlock-sandbox/airlock/backend/internal/procs"
	"github.com/airlock-sandbox/airlock/backend/internal/seccompprofile"
	"github.com/airlock-sandbox/airlock/backend/internal/watchdog"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// instance is one Docker sandbox.
type instance struct {
	id       string
	backend  *Backend
	cli      *client.Client
	daemon   *daemon
	policy   sandbox.Policy
	weakened []string
	imageEnv map[string]string // the image's own environment
	sb       *procs.Sandbox

	dir      *hostdir.Dir
	watchdog *watchdog.Watchdog
	cid      string           // container id, once created
	pid      int              // the keeper's host pid
	cg       *containerCgroup // runc: the container's cgroup; nil with runsc
	stat     *cgstat.Group    // the container's counters; nil if not found
	exited   chan struct{}    // closed when the container stopped
	oom      bool             // set before exited closes: the container was OOM-killed

	egressOnce sync.Once
	destroy    sync.Once
	destroyErr error
}

var (
	_ sandbox.Instance        = (*instance)(nil)
	_ sandbox.OutputDirOpener = (*instance)(nil)
	_ sandbox.NetworkAttacher = (*instance)(nil)
)

func newInstance(b *Backend, cli *client.Client, d *daemon, id string, pol sandbox.Policy, weak []string, env map[string]string) *instance {
	i := &instance{id: id, backend: b, cli: cli, daemon: d, policy: pol, weakened: weak, imageEnv: env, exited: make(chan struct{})}
	i.sb = procs.New(id, b.Name(), i.Destroy)
	return i
}

// runc tells whether the sandbox runs on the host's kernel.
func (i *instance) runc() bool { return i.daemon.runtime == RuntimeRunc }

// containerName is the container's name, known before it exists, which
// the watchdog removes it by.
func (i *instance) containerName() string { return "airlock-" + i.id }

// start makes the folders and the watchdog, creates the container and
// starts it, and finds its cgroup.
func (i *instance) start(ctx context.Context, ref string) error {
	b, d := i.backend, i.daemon
	lim := i.policy.Limits
	dir, err := hostdir.Create(hostdir.Options{Base: b.opts.StateDir, ID: i.id,
		UID: d.hostUID(sandboxUID), GID: d.hostGID(sandboxUID), RootGID: d.rootGID(),
		DiskBytes: lim.DiskBytes, DiskInodes: lim.DiskInodes, InputBytes: lim.InputBytes, IO: i.runc()})
	if err != nil {
		return err
	}
	i.dir = dir
	if i.watchdog, err = watchdog.Start(watchdog.Cleanup{DockerSocket: d.socket, Container: i.containerName(), Folder: dir.Path()}); err != nil {
		return err
	}
	profile, err := seccompprofile.JSON()
	if err != nil {
		return err
	}
	created, err := i.cli.ContainerCreate(ctx, containerConfig(ref, i.id),
		hostConfig(d.runtime, i.policy, dir.Binds(), profile), nil, nil, i.containerName())
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	i.cid = created.ID
	if err := i.cli.ContainerStart(ctx, i.cid, container.StartOptions{}); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	st, err := i.cli.ContainerInspect(ctx, i.cid)
	if err != nil {
		return fmt.Errorf("inspect container: %w", err)
	}
	if st.State == nil || !st.State.Running || st.State.Pid == 0 {
		return fmt.Errorf("container %s is not running after start", i.cid)
	}
	i.pid = st.State.Pid
	i.watch()
	if i.runc() {
		if i.cg, err = findCgroup(i.pid); err != nil {
			return err
		}
		i.stat = i.cg.stat
		return i.cg.limitTCP(lim.MemoryBytes)
	}
	if i.stat, err = cgstat.ForPID(i.pid); err != nil {
		b.opts.Logger.Warn("container cgroup not found; no usage or OOM reports", "id", i.id, "err", err)
	}
	return nil
}

// watch follows the container: when it stops by itself (gVisor's sentry
// ends at the memory cap, and with it the container), the sandbox died.
func (i *instance) watch() {
	waited, failed := i.cli.ContainerWait(context.Background(), i.cid, container.WaitConditionNotRunning)
	i.sb.Go(func() {
		var why string
		select {
		case r := <-waited:
			why = "exit status " + strconv.FormatInt(r.StatusCode, 10)
		case err := <-failed:
			why = err.Error()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := i.cli.ContainerInspect(ctx, i.cid)
		cancel()
		if err == nil && st.State != nil && st.State.OOMKilled {
			i.oom = true
			why = "killed for memory (the host's OOM killer)"
		}
		close(i.exited)
		i.sb.Died(fmt.Errorf("sandbox %s: its container stopped (%s): %w", i.id, why, sandbox.ErrDied))
	})
}

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// Done is closed when the sandbox has ended.
func (i *instance) Done() <-chan struct{} { return i.sb.Done() }

// Err says why the sandbox ended: ErrDestroyed, or a cause wrapping
// ErrDied when its container stopped by itself.
func (i *instance) Err() error { return i.sb.Err() }

// Files reaches the sandbox's files through its host folders.
func (i *instance) Files() sandbox.Files { return i.dir.Files() }

// OpenOutputDir opens /workspace/output, as the host sees it, for the
// artifact filter.
func (i *instance) OpenOutputDir(ctx context.Context) (*os.File, error) { return i.dir.OpenOutputDir() }

// ListenEgress opens the egress proxy's listener on the container's
// 127.0.0.1:3128, from the host, in its network namespace (runc only); it
// can be taken once.
func (i *instance) ListenEgress(ctx context.Context) (net.Listener, error) {
	if !i.runc() {
		return nil, fmt.Errorf("egress with runtime runsc: %w", sandbox.ErrUnsupported)
	}
	if !i.policy.Network.Enabled() {
		return nil, fmt.Errorf("egress: the sandbox has no egress rules: %w", sandbox.ErrInvalid)
	}
	var l net.Listener
	err := fmt.Errorf("egress: the listener was taken: %w", sandbox.ErrInvalid)
	i.egressOnce.Do(func() {
		if err = i.sb.Err(); err != nil {
			return
		}
		l, err = netns.Listen("/proc/"+strconv.Itoa(i.pid)+"/ns/net", sandbox.EgressAddr)
	})
	return l, err
}

// proxyEnv is what processes get to reach the egress proxy.
func (i *instance) proxyEnv() map[string]string {
	if !i.policy.Network.Enabled() {
		return nil
	}
	return egress.Env(sandbox.EgressAddr)
}

// Start starts one process as the sandbox user: with runc from the host,
// placed in a cgroup of its own; with runsc through an exec attached to
// the daemon.
func (i *instance) Start(ctx context.Context, ps sandbox.ProcessSpec) (sandbox.Process, error) {
	spec, err := command.Check(i.policy, ps, i.imageEnv, i.proxyEnv())
	if err != nil {
		return nil, err
	}
	if err := i.sb.Enter(); err != nil {
		return nil, err
	}
	var p *procs.Process
	if i.runc() {
		p, err = i.startRunc(ctx, spec, ps)
	} else {
		p, err = i.startRunsc(ctx, spec, ps)
	}
	if err != nil {
		i.sb.Leave()
		if gone := i.sb.Err(); gone != nil {
			err = fmt.Errorf("%w (%w)", gone, err)
		}
		return nil, fmt.Errorf("start process: %w", err)
	}
	return p, nil
}

// buffers are a process's capped stdout and stderr.
func buffers(spec command.Spec, ps sandbox.ProcessSpec) (*command.CapBuffer, *command.CapBuffer) {
	return command.NewCapBuffer(spec.OutputLimit, ps.Stdout), command.NewCapBuffer(spec.OutputLimit, ps.Stderr)
}

// removeTimeout bounds how long Destroy waits for the daemon.
const removeTimeout = 30 * time.Second

// Destroy removes the container with everything in it, waits for the
// processes' Results, and unmounts and removes the host folders.
func (i *instance) Destroy(ctx context.Context) error {
	i.destroy.Do(func() {
		i.sb.Destroyed()
		var errs []error
		if i.cid != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			err := i.cli.ContainerRemove(rctx, i.cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			if err != nil && !notFound(err) {
				errs = append(errs, fmt.Errorf("remove container %s: %w", i.cid, err))
			}
		}
		if !i.sb.Wait(removeTimeout) {
			errs = append(errs, fmt.Errorf("sandbox %s: processes still followed after %v", i.id, removeTimeout))
		}
		if i.dir != nil {
			errs = append(errs, i.dir.Remove())
		}
		if err := errors.Join(errs...); err == nil {
			errs = append(errs, i.watchdog.Stop())
		}
		i.destroyErr = errors.Join(errs...)
	})
	return i.destroyErr
}
