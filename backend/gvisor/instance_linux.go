package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// destroyTimeout bounds how long Destroy waits for runsc.
const destroyTimeout = 30 * time.Second

// instance is one gVisor sandbox.
type instance struct {
	id, cid  string
	backend  *Backend
	policy   sandbox.Policy
	imageEnv map[string]string // the image's own environment

	dir       *hostdir.Dir
	stateRoot string
	flags     []string      // runsc's global flags for this sandbox
	cg        *cgstat.Group // nil without cgroups

	proxy     *egress.Proxy // nil when the network is off
	proxyEnv  map[string]string
	forwarder chan struct{} // closed when the egress forwarder's runsc exec ended

	gate    command.Gate
	seq     int
	seqMu   sync.Mutex
	destroy sync.Once
	err     error
}

var _ sandbox.Instance = (*instance)(nil)

// ID is the sandbox's id.
func (i *instance) ID() string { return i.id }

// start makes the folders and the bundle, and creates and starts the
// container.
func (i *instance) start(ctx context.Context, src rootSource) (err error) {
	b := i.backend
	lim := i.policy.Limits
	dir, err := hostdir.Create(hostdir.Options{Base: b.opts.StateDir, ID: i.id, UID: sandboxUID, GID: sandboxGID,
		DiskBytes: lim.DiskBytes, DiskInodes: lim.DiskInodes})
	if err != nil {
		return err
	}
	i.dir = dir
	i.stateRoot = filepath.Join(dir.Path(), "runsc")
	i.flags = b.flags(i.stateRoot, i.policy.Network.Enabled())
	if err := os.Mkdir(i.stateRoot, 0o700); err != nil {
		return err
	}
	cgroupsPath := "/" + b.opts.CgroupParent + "/" + filepath.Base(dir.Path())
	binds := dir.Binds()
	if i.policy.Network.Enabled() {
		bind, err := i.egressBind()
		if err != nil {
			return err
		}
		binds = append(binds, bind)
		defer func() {
			if err == nil {
				err = i.startEgress(ctx, bind)
			}
		}()
	}
	bundle, err := i.bundle(src, binds, cgroupsPath)
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
	if i.cg, err = cgstat.ForPID(pid); err != nil {
		b.opts.Logger.Warn("sandbox cgroup not found; no usage or OOM reports", "id", i.id, "err", err)
	}
	return nil
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
	if err != nil {
		return 0, fmt.Errorf("sandbox pid %q: %w", b, err)
	}
	return pid, nil
}

// PutInput stores r read-only at /workspace/input/NAME.
func (i *instance) PutInput(ctx context.Context, name string, r io.Reader) error {
	return i.dir.PutInput(ctx, name, r)
}

// Output opens /workspace/output, as the host sees it, for the artifact
// filter.
func (i *instance) Output(ctx context.Context) (*os.File, error) { return i.dir.OpenOutput() }

// Destroy deletes the container, which ends the sentry and every process
// in it, and unmounts and removes the sandbox's folder.
func (i *instance) Destroy(ctx context.Context) error {
	i.destroy.Do(func() {
		i.gate.Close()
		if i.proxy != nil {
			_ = i.proxy.Close()
		}
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
		killByArg("--root=" + i.stateRoot)
		if i.forwarder != nil {
			select {
			case <-i.forwarder:
			case <-dctx.Done():
				errs = append(errs, fmt.Errorf("egress forwarder: %w", dctx.Err()))
			}
		}
		cgstat.RemoveEmpty(i.backend.opts.CgroupParent)
		errs = append(errs, i.dir.Remove())
		i.err = errors.Join(errs...)
	})
	return i.err
}

// started tells whether runsc knows the container.
func (i *instance) started() bool {
	ents, err := os.ReadDir(i.stateRoot)
	return err == nil && len(ents) > 0
}

// nextSeq numbers the commands, for their pid files.
func (i *instance) nextSeq() int {
	i.seqMu.Lock()
	defer i.seqMu.Unlock()
	i.seq++
	return i.seq
}
