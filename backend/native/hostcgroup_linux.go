package native

import (
	"fmt"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// HostCgroup is a cgroup of this package's making for a process that runs
// on the host on a sandbox's behalf, outside any namespace (the microvm
// backend's QEMU): its memory (without swap), CPU and pids are capped as
// a sandbox's processes are, on cgroup v1, v2 or both, and it is named
// after its owner like a sandbox's cgroup, so that CleanupStale of a
// later Backend with the same CgroupParent removes it once its owner is
// gone.
type HostCgroup struct {
	cg   *cgroup
	proc *procCgroup
	dir  *os.File // its v2 folder, or nil
}

// HostLimits are the caps of a HostCgroup.
type HostLimits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int
}

// NewHostCgroup makes a cgroup with the caps l.
func (b *Backend) NewHostCgroup(l HostLimits) (*HostCgroup, error) {
	h := b.hostInfo()
	if h.cgroupErr != nil {
		return nil, fmt.Errorf("cgroups: %v: %w", h.cgroupErr, sandbox.ErrUnsupported)
	}
	cg, err := h.cgroups.create(hostdir.Owner() + "-" + hostdir.NewID())
	if err != nil {
		return nil, err
	}
	c := &HostCgroup{cg: cg}
	err = cg.prepare(os.Geteuid())
	if err == nil {
		err = cg.setLimits(cgLimits{memory: l.MemoryBytes, cpus: l.CPUs, pids: l.Pids, initMemory: initMemory})
	}
	if err == nil {
		var tasks []*os.File
		c.proc, tasks, c.dir, err = cg.newProc("p1", os.Geteuid())
		for _, t := range tasks {
			t.Close()
		}
	}
	if err != nil {
		_ = c.Remove()
		return nil, err
	}
	return c, nil
}

// Dir returns the descriptor of the cgroup's v2 folder, for
// SysProcAttr's CgroupFD (CLONE_INTO_CGROUP), or -1 where no controller
// is on v2.
func (c *HostCgroup) Dir() int {
	if c.dir == nil {
		return -1
	}
	return int(c.dir.Fd())
}

// Place moves process pid into the cgroup's v1 folders; it started in its
// v2 folder already. A thread of the caller's never joins the cgroup, so
// that Remove, which kills what is inside, cannot reach the caller.
func (c *HostCgroup) Place(pid int) error {
	for hy, d := range c.proc.dirs {
		if !hy.v2 {
			if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stats reads the cgroup's counters.
func (c *HostCgroup) Stats() cgstat.Stats { return c.proc.stat.Stats() }

// Remove kills whatever is still in the cgroup and removes it.
func (c *HostCgroup) Remove() error {
	if c.dir != nil {
		c.dir.Close()
		c.dir = nil
	}
	var err error
	if c.proc != nil {
		err = c.proc.sweep(-1) // no init of a sandbox's in there to spare
	}
	if rerr := c.cg.remove(); err == nil {
		err = rerr
	}
	return err
}
