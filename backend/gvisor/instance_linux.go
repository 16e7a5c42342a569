package gvisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/procs"
	"github.com/airlock-sandbox/airlock/backend/internal/watchdog"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// destroyTimeout bounds how long Destroy waits for runsc.
const destroyTimeout = 30 * time.Second

// instance is one gVisor sandbox.
type instance struct {
	id, cid  string
	backend  *Backend
	policy   sandbox.Policy
	weakened []string
	imageEnv map[string]string // the image's own environment
	sb       *procs.Sandbox

	dir       *hostdir.Dir
	watchdog  *watchdog.Watchdog
	stateRoot string
	flags     []string      // runsc's global flags for this sandbox
	stat      *cgstat.Group // nil without cgroups
	sentry    int           // a pidfd of the sandbox's process; -1 before it runs
	exited    chan struct{} // closed when that process has ended
	oom       bool          // set before exited closes: the host's OOM killer ended it

	egress    *egressBridge // nil when the network is off
	proxyEnv  map[string]string
	egressMu  sync.Mutex
	egressL   bool // the listener was handed out
	destroy   sync.Once
	destroyEr error
}

var (
	_ sandbox.Instance        = (*instance)(nil)
	_ sandbox.OutputDirOpener = (*instance)(nil)
	_ sandbox.NetworkAttacher = (*instance)(nil)
)

func newInstance(b *Backend, id string, pol sandbox.Policy, weak []string, env map[string]string) *instance {
	i := &instance{id: id, cid: containerID(id), backend: b, policy: pol, weakened: weak, imageEnv: env, sentry: -1, exited: make(chan struct{})}
	i.sb = procs.New(id, b.Name(), i.Destroy)
	return i
}

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// start makes the folders, the watchdog and the bundle, and creates and
// starts the container.
func (i *instance) start(ctx context.Context, img sandbox.Image) (err error) {
	b := i.backend
	lim := i.policy.Limits
	dir, err := hostdir.Create(hostdir.Options{Base: b.opts.StateDir, ID: i.id, UID: sandboxUID, GID: sandboxGID,
		DiskBytes: lim.DiskBytes, DiskInodes: lim.DiskInodes, InputBytes: lim.InputBytes})
	if err != nil {
		return err
	}
	i.dir = dir
	i.stateRoot = filepath.Join(dir.Path(), "runsc")
	i.flags = b.flags(i.stateRoot, i.policy.Network.Enabled())
	if err := os.Mkdir(i.stateRoot, 0o700); err != nil {
		return err
	}
	if i.watchdog, err = watchdog.Start(watchdog.Cleanup{Runsc: b.probe().runsc, RunscFlags: i.flags, RunscID: i.cid,
		RunscKillArg: killArg(i.stateRoot), Folder: dir.Path()}); err != nil {
		return err
	}
	cgroupsPath := "/" + b.opts.CgroupParent + "/" + filepath.Base(dir.Path())
	binds := dir.Binds()
	if i.policy.Network.Enabled() {
		if i.egress, err = newEgressBridge(dir.Path()); err != nil {
			return err
		}
		binds = append(binds, i.egress.bind())
	}
	bundle, err := i.bundle(img, binds, cgroupsPath)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	pidFile := filepath.Join(dir.Path(), "sandbox.pid")
	if _, err := i.runsc(ctx, "run", "--detach", "--bundle", bundle, "--pid-file", pidFile, i.cid); err != nil {
		return err
	}
	pid, err := readPID(pidFile)
	if err != nil {
		return err
	}
	if i.sentry, err = unix.PidfdOpen(pid, 0); err != nil {
		return fmt.Errorf("the sandbox's process %d: %w", pid, err)
	}
	if i.stat, err = cgstat.ForPID(pid); err != nil {
		b.opts.Logger.Warn("sandbox cgroup not found; no usage or OOM reports", "id", i.id, "err", err)
	}
	i.sb.Go(i.watch)
	if i.egress != nil {
		if err := i.egress.startForwarder(ctx, i); err != nil {
			return err
		}
		i.proxyEnv = egressEnv()
	}
	return nil
}

// watch waits for the sandbox's process to end. If it ends by itself (the
// host's OOM killer ends gVisor's sentry at the memory cap, and with it
// every process of the sandbox), the sandbox died.
func (i *instance) watch() {
	fds := []unix.PollFd{{Fd: int32(i.sentry), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	why := "it exited"
	if i.stat != nil && i.stat.Stats().OOMKills > 0 {
		i.oom = true
		why = "killed for memory (the host's OOM killer)"
	}
	close(i.exited)
	i.sb.Died(fmt.Errorf("sandbox %s: gVisor's sentry ended (%s): %w", i.id, why, sandbox.ErrDied))
}

// sentryGone tells whether the sandbox's process has ended, waiting for
// it at most wait: its end may reach a runsc exec before the host has
// reaped it.
func (i *instance) sentryGone(wait time.Duration) bool {
	select {
	case <-i.exited:
		return true
	default:
	}
	if i.sentry < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(i.sentry), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(wait.Milliseconds()))
	return err == nil && n > 0
}

// oomKilled tells, once the sentry ended, whether it was for memory.
func (i *instance) oomKilled() bool {
	select {
	case <-i.exited:
		return i.oom
	case <-time.After(2 * time.Second):
		return false
	}
}

// runsc runs one runsc command on this sandbox.
func (i *instance) runsc(ctx context.Context, args ...string) ([]byte, error) {
	return i.backend.runsc(ctx, i.stateRoot, i.flags, args...)
}

// readPID reads the pid runsc wrote.
func readPID(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("sandbox pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("sandbox pid %q: %w", b, err)
	}
	return pid, nil
}

// Done is closed when the sandbox has ended.
func (i *instance) Done() <-chan struct{} { return i.sb.Done() }

// Err says why the sandbox ended: ErrDestroyed, or a cause wrapping
// ErrDied when its sentry ended by itself.
func (i *instance) Err() error { return i.sb.Err() }

// Files reaches the sandbox's files through its host folders.
func (i *instance) Files() sandbox.Files { return i.dir.Files() }

// OpenOutputDir opens /workspace/output, as the host sees it, for the
// artifact filter.
func (i *instance) OpenOutputDir(ctx context.Context) (*os.File, error) { return i.dir.OpenOutputDir() }

// ListenEgress opens the unix socket the forwarder inside relays
// 127.0.0.1:3128 to; it can be taken once.
func (i *instance) ListenEgress(ctx context.Context) (net.Listener, error) {
	if i.egress == nil {
		return nil, fmt.Errorf("egress: the sandbox has no egress rules: %w", sandbox.ErrInvalid)
	}
	i.egressMu.Lock()
	defer i.egressMu.Unlock()
	if i.egressL {
		return nil, fmt.Errorf("egress: the listener was taken: %w", sandbox.ErrInvalid)
	}
	if err := i.sb.Err(); err != nil {
		return nil, err
	}
	l, err := i.egress.listen()
	i.egressL = err == nil
	return l, err
}

// Destroy deletes the container, which ends the sentry and every process
// in it, waits for the processes' Results, and unmounts and removes the
// sandbox's folder.
func (i *instance) Destroy(ctx context.Context) error {
	i.destroy.Do(func() {
		i.sb.Destroyed()
		if i.dir == nil {
			return
		}
		var errs []error
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
		defer cancel()
		if i.started() {
			if _, err := i.runsc(dctx, "delete", "--force", i.cid); err != nil {
				errs = append(errs, err)
			}
		}
		watchdog.KillByArg(killArg(i.stateRoot))
		if i.egress != nil {
			errs = append(errs, i.egress.close(dctx))
		}
		if !i.sb.Wait(destroyTimeout) {
			errs = append(errs, fmt.Errorf("sandbox %s: processes still followed after %v", i.id, destroyTimeout))
		}
		if i.sentry >= 0 {
			select {
			case <-i.exited:
			case <-dctx.Done():
				errs = append(errs, fmt.Errorf("sandbox %s: its sentry did not end", i.id))
			}
			unix.Close(i.sentry)
		}
		cgstat.RemoveEmpty(i.backend.opts.CgroupParent)
		errs = append(errs, i.dir.Remove())
		if err := errors.Join(errs...); err == nil {
			errs = append(errs, i.watchdog.Stop())
		}
		i.destroyEr = errors.Join(errs...)
	})
	return i.destroyEr
}

// started tells whether runsc knows the container.
func (i *instance) started() bool {
	ents, err := os.ReadDir(i.stateRoot)
	return err == nil && len(ents) > 0
}
