package native

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
)

// cgroups cap memory (no swap), CPU and pids for the whole sandbox, count
// its CPU time and peak memory, and tell when the kernel killed something
// for memory. Each controller is taken from cgroup v2 when the unified
// hierarchy offers it, else from its v1 hierarchy, so pure v2, pure v1 and
// hybrid hosts all work.

// Controllers the sandbox uses. CPU time comes from the cpu controller on
// v2 and from the commands' rusage on v1, which saves a cpuacct cgroup.
const (
	ctlMemory = "memory"
	ctlCPU    = "cpu"
	ctlPids   = "pids"
)

// hierarchy is one mounted cgroup tree.
type hierarchy struct {
	mount string
	v2    bool
}

// cgroupHost maps each controller to the hierarchy that provides it.
type cgroupHost struct {
	ctl    map[string]*hierarchy
	parent string // folder under each hierarchy's root that holds sandboxes
}

// detectCgroups reads the mount table. It never fails: a controller it
// cannot find is simply absent from the map.
func detectCgroups(parent string) *cgroupHost {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return &cgroupHost{ctl: map[string]*hierarchy{}, parent: parent}
	}
	defer f.Close()
	return parseCgroups(f, parent, func(mount string) string {
		b, _ := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
		return string(b)
	})
}

// parseCgroups maps controllers to hierarchies from a mountinfo table;
// v2Controllers reads the controllers a cgroup2 mount offers.
func parseCgroups(mountinfo io.Reader, parent string, v2Controllers func(mount string) string) *cgroupHost {
	h := &cgroupHost{ctl: map[string]*hierarchy{}, parent: parent}
	var v2 *hierarchy
	v1 := map[string]*hierarchy{}
	mounts, _ := cgstat.ParseMounts(mountinfo)
	for _, m := range mounts {
		if m.Root != "/" {
			continue
		}
		if m.V2 {
			if v2 == nil {
				v2 = &hierarchy{mount: m.Dir, v2: true}
			}
			continue
		}
		for _, c := range m.Controllers {
			switch c {
			case ctlMemory, ctlCPU, ctlPids:
				if v1[c] == nil {
					v1[c] = &hierarchy{mount: m.Dir}
				}
			}
		}
	}
	if v2 != nil {
		for _, c := range strings.Fields(v2Controllers(v2.mount)) {
			if c == ctlMemory || c == ctlCPU || c == ctlPids {
				h.ctl[c] = v2
			}
		}
	}
	for c, hy := range v1 {
		if h.ctl[c] == nil {
			h.ctl[c] = hy
		}
	}
	return h
}

// describe says which version provides each controller, for doctor.
func (h *cgroupHost) describe(c string) (string, bool) {
	hy := h.ctl[c]
	if hy == nil {
		return "absent", false
	}
	if hy.v2 {
		return "cgroup v2 at " + hy.mount, true
	}
	return "cgroup v1 at " + hy.mount, true
}

// hierarchies lists each distinct hierarchy in use, once.
func (h *cgroupHost) hierarchies() []*hierarchy {
	var out []*hierarchy
	seen := map[*hierarchy]bool{}
	for _, c := range []string{ctlMemory, ctlCPU, ctlPids} {
		if hy := h.ctl[c]; hy != nil && !seen[hy] {
			seen[hy] = true
			out = append(out, hy)
		}
	}
	return out
}

// cgLimits are the caps written into a sandbox's cgroup.
type cgLimits struct {
	memory int64
	cpus   float64
	pids   int
}

// cgroup is one sandbox's cgroup, possibly spread over several hierarchies.
type cgroup struct {
	host *cgroupHost
	dirs map[*hierarchy]string
	stat *cgstat.Group // reads the counters
}

// create makes the sandbox's cgroup in every hierarchy; setLimits writes
// the limits. A missing controller is left out; the caller reports it.
func (h *cgroupHost) create(name string) (*cgroup, error) {
	cg := &cgroup{host: h, dirs: map[*hierarchy]string{}}
	for _, hy := range h.hierarchies() {
		dir, err := h.mkdir(hy, name)
		if err != nil {
			cg.remove()
			return nil, err
		}
		cg.dirs[hy] = dir
	}
	dirs, v2 := map[string]string{}, map[string]bool{}
	for _, c := range []string{ctlMemory, ctlCPU, ctlPids} {
		if d, ok := cg.dir(c); ok {
			dirs[c], v2[c] = d, cg.v2(c)
		}
	}
	cg.stat = cgstat.New(dirs, v2)
	return cg, nil
}

// mkdir creates parent/name under hy, creating parent if needed. Another
// airlock may remove an empty parent at any moment, so ENOENT is retried.
func (h *cgroupHost) mkdir(hy *hierarchy, name string) (string, error) {
	parent := filepath.Join(hy.mount, h.parent)
	dir := filepath.Join(parent, name)
	var err error
	for range 20 {
		if err = os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("cgroup %s: %w", parent, err)
		}
		if hy.v2 {
			if err = enableControllers(hy.mount, parent); err != nil {
				continue
			}
		}
		if err = os.Mkdir(dir, 0o755); err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return "", fmt.Errorf("cgroup %s: %w", dir, err)
}

// enableControllers turns on memory, cpu and pids for the children of
// every folder from the v2 root down to dir.
func enableControllers(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return err
	}
	cur := root
	for _, part := range append([]string{""}, strings.Split(rel, "/")...) {
		cur = filepath.Join(cur, part)
		avail, err := os.ReadFile(filepath.Join(cur, "cgroup.controllers"))
		if err != nil {
			return err
		}
		var want []string
		for _, c := range strings.Fields(string(avail)) {
			if c == ctlMemory || c == ctlCPU || c == ctlPids {
				want = append(want, "+"+c)
			}
		}
		if len(want) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(cur, "cgroup.subtree_control"), []byte(strings.Join(want, " ")), 0); err != nil {
			return fmt.Errorf("enable %v in %s: %w", want, cur, err)
		}
	}
	return nil
}

func (cg *cgroup) dir(ctl string) (string, bool) {
	hy := cg.host.ctl[ctl]
	if hy == nil {
		return "", false
	}
	d, ok := cg.dirs[hy]
	return d, ok
}

func (cg *cgroup) v2(ctl string) bool {
	hy := cg.host.ctl[ctl]
	return hy != nil && hy.v2
}

func writeFile(dir, name, val string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	return nil
}

func (cg *cgroup) setLimits(lim cgLimits) error {
	if err := cg.setMemory(lim.memory); err != nil {
		return err
	}
	if d, ok := cg.dir(ctlCPU); ok {
		const period = 100000
		quota := max(1000, int64(lim.cpus*period))
		var err error
		if cg.v2(ctlCPU) {
			err = writeFile(d, "cpu.max", fmt.Sprintf("%d %d", quota, period))
		} else if err = writeFile(d, "cpu.cfs_period_us", strconv.Itoa(period)); err == nil {
			err = writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
		}
		if err != nil {
			return err
		}
	}
	if d, ok := cg.dir(ctlPids); ok {
		if err := writeFile(d, "pids.max", strconv.Itoa(lim.pids)); err != nil {
			return err
		}
	}
	return nil
}

// setMemory caps memory and forbids swap. It may be called again to raise
// the cap (input files are added on top of the policy's memory).
func (cg *cgroup) setMemory(bytes int64) error {
	d, ok := cg.dir(ctlMemory)
	if !ok {
		return nil
	}
	v := strconv.FormatInt(bytes, 10)
	if cg.v2(ctlMemory) {
		if err := writeFile(d, "memory.max", v); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
			return writeFile(d, "memory.swap.max", "0")
		}
		return nil
	}
	// v1: memsw (memory+swap) must stay >= limit, so the order depends on
	// whether the cap goes up or down; try both orders.
	memsw := filepath.Join(d, "memory.memsw.limit_in_bytes")
	_, hasSwap := os.Stat(memsw)
	if hasSwap == nil {
		if err := writeFile(d, "memory.memsw.limit_in_bytes", v); err == nil {
			return writeFile(d, "memory.limit_in_bytes", v)
		}
	}
	if err := writeFile(d, "memory.limit_in_bytes", v); err != nil {
		return err
	}
	if hasSwap == nil {
		return writeFile(d, "memory.memsw.limit_in_bytes", v)
	}
	return writeFile(d, "memory.swappiness", "0")
}

// addProc moves pid into the cgroup in every hierarchy.
func (cg *cgroup) addProc(pid int) error {
	for _, d := range cg.dirs {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// remove kills anything still inside (nothing should be) and removes the
// cgroup folders, then the shared parent folder if it is empty.
func (cg *cgroup) remove() error {
	var errs []error
	for hy, d := range cg.dirs {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(filepath.Join(hy.mount, cg.host.parent))
	}
	return errors.Join(errs...)
}

// removeCgroupDir empties and removes one cgroup folder. The last tasks of
// a killed sandbox may take a moment to leave, so EBUSY is retried.
func removeCgroupDir(d string) error {
	var err error
	for i := range 200 {
		if err = os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		killCgroupProcs(d)
		time.Sleep(time.Duration(min(i+1, 20)) * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}

func killCgroupProcs(d string) {
	b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// cleanupStale removes the cgroups of airlock processes that died without
// cleaning up (killed with SIGKILL, say). Sandboxes of live processes are
// left alone.
func (h *cgroupHost) cleanupStale() []string {
	var removed []string
	for _, hy := range h.hierarchies() {
		parent := filepath.Join(hy.mount, h.parent)
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if owner, _, ok := hostdir.SplitName(e.Name()); !e.IsDir() || !ok || hostdir.OwnerAlive(owner) {
				continue
			}
			d := filepath.Join(parent, e.Name())
			if removeCgroupDir(d) == nil {
				removed = append(removed, d)
			}
		}
		_ = os.Remove(parent)
	}
	return removed
}
