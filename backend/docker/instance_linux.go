package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/netns"
	"github.com/airlock-sandbox/airlock/backend/internal/seccompprofile"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// egressAddr is where the egress proxy listens inside the sandbox.
const egressAddr = "127.0.0.1:3128"

// instance is one Docker sandbox.
type instance struct {
	id       string
	backend  *Backend
	cli      *client.Client
	policy   sandbox.Policy
	weakened []string
	imageEnv map[string]string // the image's own environment

	dir      *hostdir.Dir
	cid      string        // container id
	cg       *cgstat.Group // nil when the container's cgroup was not found
	reaper   reaper
	proxy    *egress.Proxy // nil when the network is off
	proxyEnv map[string]string

	gate  command.Gate
	ended chan struct{} // closed when the container stops

	destroy    sync.Once
	destroyErr error
}

var _ sandbox.Instance = (*instance)(nil)

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// start creates the folders and the container, starts it, and finds its
// cgroup and, with egress, its network namespace.
func (i *instance) start(ctx context.Context, ref string) error {
	b := i.backend
	lim := i.policy.Limits
	dir, err := hostdir.Create(hostdir.Options{Base: b.opts.StateDir, ID: i.id, UID: sandboxUID, GID: sandboxGID,
		DiskBytes: lim.DiskBytes, DiskInodes: lim.DiskInodes})
	if err != nil {
		return err
	}
	i.dir = dir
	profile, err := seccompprofile.JSON()
	if err != nil {
		return err
	}
	created, err := i.cli.ContainerCreate(ctx, containerConfig(ref, i.id),
		hostConfig(b.opts.Runtime, i.policy, dir.Binds(), profile), nil, nil, "airlock-"+i.id)
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
	i.watch()
	pid := st.State.Pid
	if i.cg, err = cgstat.ForPID(pid); err != nil {
		b.opts.Logger.Warn("container cgroup not found; no usage, OOM or pids reports", "id", i.id, "err", err)
	}
	i.reaper = newReaper(i, b.opts.Runtime)
	if i.policy.Network.Enabled() {
		return i.startEgress(pid)
	}
	return nil
}

// startEgress opens the proxy's listening socket on the container's lo,
// from the host, and serves it.
func (i *instance) startEgress(pid int) error {
	proxy, err := i.backend.newProxy(i.id, i.policy)
	if err != nil {
		return err
	}
	i.proxy = proxy
	l, err := netns.Listen("/proc/"+strconv.Itoa(pid)+"/ns/net", egressAddr)
	if err != nil {
		return fmt.Errorf("egress listener: %w", err)
	}
	i.proxyEnv = egress.Env(egressAddr)
	go func() { _ = proxy.Serve(context.Background(), l) }()
	return nil
}

// watch closes i.ended when the container stops: gVisor's sentry ends at
// the memory cap, and with it every command.
func (i *instance) watch() {
	i.ended = make(chan struct{})
	waited, failed := i.cli.ContainerWait(context.Background(), i.cid, container.WaitConditionNotRunning)
	go func() {
		select {
		case <-waited:
		case <-failed:
		}
		close(i.ended)
	}()
}

// sweep kills what the commands left, within killGrace.
func (i *instance) sweep() error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	if err := i.reaper.sweep(ctx); err != nil {
		return fmt.Errorf("processes left by the command could not be killed: %w", err)
	}
	return nil
}

// PutInput stores r read-only at /workspace/input/NAME.
func (i *instance) PutInput(ctx context.Context, name string, r io.Reader) error {
	return i.dir.PutInput(ctx, name, r)
}

// Output opens /workspace/output, as the host sees it, for the artifact
// filter.
func (i *instance) Output(ctx context.Context) (*os.File, error) { return i.dir.OpenOutput() }

// Destroy removes the container with everything in it, stops the proxy,
// and unmounts and removes the host folders.
func (i *instance) Destroy(ctx context.Context) error {
	i.destroy.Do(func() {
		i.gate.Close()
		var errs []error
		if i.proxy != nil {
			_ = i.proxy.Close()
		}
		if i.cid != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			err := i.cli.ContainerRemove(rctx, i.cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			if err != nil && !notFound(err) {
				errs = append(errs, fmt.Errorf("remove container %s: %w", i.cid, err))
			}
		}
		if i.dir != nil {
			errs = append(errs, i.dir.Remove())
		}
		i.destroyErr = errors.Join(errs...)
	})
	return i.destroyErr
}

// removeTimeout bounds how long Destroy waits for the daemon.
const removeTimeout = 30 * time.Second
