package docker

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
)

// With runc, every process of a sandbox gets a cgroup folder of its own
// below the container's, made from the host, in each hierarchy that
// counts or kills it:
//
//	<hierarchy>/docker/<container>/      the container: the policy's caps, the keeper
//	    airlock-p1/ airlock-p2/ …         one per process
//
// On cgroup v1 the folders carry the policy's memory and pids caps, so a
// process's OOM or fork bomb is its own; on v2 they get no controllers
// (the container's folder then holds a process, its keeper, and v2 allows
// controllers only where no process is), so that runc can still start
// execs in the container's folder. When a process ends, its folders are
// killed whole: with cgroup.kill where a v2 folder exists, else by
// freezing the v1 freezer folder, else by killing in a loop.

// Controllers whose v1 hierarchies get process folders.
var procControllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// containerCgroup is a container's cgroup as the host sees it.
type containerCgroup struct {
	folders []cgFolder
	stat    *cgstat.Group // the container's own counters
}

// cgFolder is the container's folder in one hierarchy.
type cgFolder struct {
	dir  string
	v2   bool
	ctls []string // a v1 hierarchy's controllers among procControllers
}

func (f cgFolder) has(ctl string) bool { return slices.Contains(f.ctls, ctl) }

// findCgroup finds the cgroup folders of host process pid (the
// container's keeper) in the hierarchies mounted here.
func findCgroup(pid int) (*containerCgroup, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	mounts, err := cgstat.ParseMounts(mi)
	mi.Close()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cgroups of the container: %w", err)
	}
	defer f.Close()
	cg := &containerCgroup{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "ID:CONTROLLERS:PATH"; v2 is "0::PATH"
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, m := range mounts {
			if m.Root != "/" || m.V2 != (parts[1] == "") {
				continue
			}
			var ctls []string
			if !m.V2 {
				for _, c := range strings.Split(parts[1], ",") {
					if slices.Contains(procControllers, c) && slices.Contains(m.Controllers, c) {
						ctls = append(ctls, c)
					}
				}
				if len(ctls) == 0 {
					continue
				}
			}
			cg.folders = append(cg.folders, cgFolder{dir: filepath.Join(m.Dir, parts[2]), v2: m.V2, ctls: ctls})
			break
		}
	}
	if len(cg.folders) == 0 {
		return nil, fmt.Errorf("container process %d: no cgroup folder found", pid)
	}
	cg.stat, err = cgstat.ForPID(pid)
	return cg, err
}

// folder is the container's folder that carries ctl on v1, if any.
func (cg *containerCgroup) folder(ctl string) (cgFolder, bool) {
	for _, f := range cg.folders {
		if f.has(ctl) {
			return f, true
		}
	}
	return cgFolder{}, false
}

// tcpShare is the part of the memory cap that TCP buffers may take on
// cgroup v1, as with native.
func tcpShare(memory int64) int64 { return max(memory/4, 4<<20) }

// limitTCP caps socket buffers in the container's v1 memory folder; v1
// counts them only once the cap is set.
func (cg *containerCgroup) limitTCP(memory int64) error {
	f, ok := cg.folder("memory")
	if !ok {
		return nil
	}
	return setTCP(f.dir, memory)
}

func setTCP(dir string, memory int64) error {
	err := writeFile(dir, "memory.kmem.tcp.limit_in_bytes", strconv.FormatInt(tcpShare(memory), 10))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// tcpLimitAvailable tells whether this host's v1 memory controller can cap
// socket buffers.
func tcpLimitAvailable() bool {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer mi.Close()
	mounts, _ := cgstat.ParseMounts(mi)
	for _, m := range mounts {
		if !m.V2 && m.Root == "/" && slices.Contains(m.Controllers, "memory") {
			_, err := os.Stat(filepath.Join(m.Dir, "memory.kmem.tcp.limit_in_bytes"))
			return err == nil
		}
	}
	return false
}

// procLimits are the caps of one process's v1 folders.
type procLimits struct {
	memory int64
	pids   int
}

// procCgroup is one process's folders.
type procCgroup struct {
	parent *containerCgroup
	dirs   []string // one per container folder, in its order
	stat   *cgstat.Group
}

// newProc makes the folders of one process and sets its caps.
func (cg *containerCgroup) newProc(name string, lim procLimits) (p *procCgroup, err error) {
	p = &procCgroup{parent: cg}
	defer func() {
		if err != nil {
			_ = p.remove()
		}
	}()
	dirs, v2 := map[string]string{}, map[string]bool{}
	for _, f := range cg.folders {
		d := filepath.Join(f.dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return p, fmt.Errorf("process cgroup: %w", err)
		}
		p.dirs = append(p.dirs, d)
		if f.v2 {
			// no controller here: counters come from the container's
			// folder, but for cpu.stat, which every v2 folder has
			dirs["cpu"], v2["cpu"] = d, true
			continue
		}
		if f.has("memory") {
			if err := setMemory(d, lim.memory); err != nil {
				return p, err
			}
			if err := setTCP(d, lim.memory); err != nil {
				return p, err
			}
		}
		if f.has("pids") {
			if err := writeFile(d, "pids.max", strconv.Itoa(lim.pids)); err != nil {
				return p, err
			}
		}
		for _, c := range f.ctls {
			dirs[c], v2[c] = d, false
		}
	}
	for _, f := range cg.folders {
		if f.v2 {
			for _, c := range []string{"memory", "pids"} {
				if _, ok := dirs[c]; !ok {
					dirs[c], v2[c] = f.dir, true
				}
			}
		}
	}
	if dirs["cpuacct"] != "" {
		delete(dirs, "cpu") // v1 cpuacct counts the time
	}
	p.stat = cgstat.New(dirs, v2)
	if f, ok := cg.folder("pids"); ok {
		p.stat.CountPidsEventsOf(f.dir)
	}
	return p, nil
}

// setMemory caps memory in v1 folder d and forbids swap.
func setMemory(d string, bytes int64) error {
	v := strconv.FormatInt(bytes, 10)
	if err := writeFile(d, "memory.limit_in_bytes", v); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
		return writeFile(d, "memory.memsw.limit_in_bytes", v)
	}
	return writeFile(d, "memory.swappiness", "0")
}

func writeFile(dir, name, val string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// add moves host process pid into the process's folders.
func (p *procCgroup) add(pid int) error {
	for _, d := range p.dirs {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// killTimeout bounds one kill of a process's folders.
const killTimeout = 10 * time.Second

// kill kills everything in the process's folders and waits until they
// are empty.
func (p *procCgroup) kill() error {
	deadline := time.Now().Add(killTimeout)
	killer, freezer := -1, -1
	for k, f := range p.parent.folders {
		if f.v2 {
			if _, err := os.Stat(filepath.Join(p.dirs[k], "cgroup.kill")); err == nil {
				killer = k
			}
		} else if f.has("freezer") {
			freezer = k
		}
	}
	switch {
	case killer >= 0:
		if err := writeFile(p.dirs[killer], "cgroup.kill", "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	case freezer >= 0:
		if err := freezeAndKill(p.dirs[freezer], deadline); err != nil {
			return err
		}
	}
	for _, d := range p.dirs {
		if err := killUntilEmpty(d, deadline, func(int) bool { return true }); err != nil {
			return err
		}
	}
	return nil
}

// freezeAndKill freezes a v1 freezer folder, so that nothing in it can
// fork, kills everything in it, and thaws it for the kills to land.
func freezeAndKill(d string, deadline time.Time) error {
	if err := writeFile(d, "freezer.state", "FROZEN"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
		if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s did not freeze", d)
		}
		time.Sleep(100 * time.Microsecond)
	}
	killProcs(d, func(int) bool { return true })
	return writeFile(d, "freezer.state", "THAWED")
}

// killUntilEmpty kills the processes of folder d that match until none is
// left.
func killUntilEmpty(d string, deadline time.Time, match func(pid int) bool) error {
	for wait := 50 * time.Microsecond; ; wait = min(wait*2, 5*time.Millisecond) {
		if killProcs(d, match) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes still running after %v", d, killTimeout)
		}
		time.Sleep(wait)
	}
}

// killProcs sends SIGKILL to the processes of folder d that match and
// says how many it found.
func killProcs(d string, match func(pid int) bool) int {
	b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	n := 0
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 && match(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// killEscapees kills every process of host uid in the container's own
// folders: a process that left its folder's reach (a wrapper shell that
// something continued before the host placed it).
func (cg *containerCgroup) killEscapees(uid int) error {
	deadline := time.Now().Add(killTimeout)
	for _, f := range cg.folders {
		if err := killUntilEmpty(f.dir, deadline, func(pid int) bool { return processUID(pid) == uid }); err != nil {
			return err
		}
	}
	return nil
}

// processUID is a host process's real uid, -1 when it is gone or a
// zombie. The name a process gives itself comes first in its status and
// is escaped there, and the last "Uid:" line counts.
func processUID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	uid := -1
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "State:"); ok && strings.HasPrefix(strings.TrimSpace(rest), "Z") {
			return -1
		}
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if v, err := strconv.Atoi(f[0]); err == nil {
					uid = v
				}
			}
		}
	}
	return uid
}

// remove removes the process's folders, killing what is left.
func (p *procCgroup) remove() error {
	var errs []error
	for _, d := range p.dirs {
		errs = append(errs, removeCgroupDir(d))
	}
	return errors.Join(errs...)
}

// removeCgroupDir removes one cgroup folder. The last tasks of a killed
// process may take a moment to leave, so EBUSY is retried.
func removeCgroupDir(d string) error {
	var err error
	for i := range 200 {
		if err = os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		killProcs(d, func(int) bool { return true })
		time.Sleep(time.Duration(min(i+1, 20)) * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}
