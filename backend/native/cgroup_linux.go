package native

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/cgstat"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"golang.org/x/sys/unix"
)

// A sandbox's cgroup is a small tree, in every hierarchy in use:
//
//	<parent>/<owner>-<id>/        the sandbox
//	    init/                     init alone, with a small reserve of its own
//	    procs/                    the policy's caps: memory, CPU, pids
//	        p1/ p2/ …             one per process, for its sweep and usage
//
// Init never shares a cap with the code, so a fork bomb or a memory bomb
// cannot starve it. Each process starts in its own folder (see
// nsinit.ExecSpec) and the code cannot leave it: no cgroup file system is
// mounted inside. When a process ends, its folder is killed whole (the
// sweep): what it started dies with it, and nothing else does.
//
// Each controller is taken from cgroup v2 when the unified hierarchy
// offers it, else from its v1 hierarchy, so pure v2, pure v1 and hybrid
// hosts all work. The sweep kills with cgroup.kill where the processes'
// folders are v2, else freezes them (v1 freezer) and kills, else kills in
// a loop.

// Controllers the sandbox uses. CPU time comes from the cpu controller on
// v2 and from the commands' rusage on v1, which saves a cpuacct cgroup.
const (
	ctlMemory  = "memory"
	ctlCPU     = "cpu"
	ctlPids    = "pids"
	ctlFreezer = "freezer"
)

// Folder names inside a sandbox's cgroup.
const (
	cgInit  = "init"
	cgProcs = "procs"
)

// Init's own reserve: enough for its Go runtime, the threads of file
// operations and of starting commands, and its heap.
const (
	initPids   = 96
	initMemory = 64 << 20
)

// hierarchy is one mounted cgroup tree.
type hierarchy struct {
	mount string
	v2    bool
	// own is this process's cgroup in the hierarchy, "/" at its root.
	own string
}

// cgroupHost maps each controller to the hierarchy that provides it and
// knows where sandboxes go.
type cgroupHost struct {
	ctl map[string]*hierarchy
	// track is where processes are swept: a v2 hierarchy (cgroup.kill) or
	// the v1 freezer; nil means kill in a loop.
	track *hierarchy
	// parents holds, per hierarchy in use, the folder sandboxes go in.
	parents map[*hierarchy]string
	// placement says where parents are, for doctor.
	placement string
	name      string // the parent folders' own name, "airlock" by default
}

// detectCgroups reads the mount table and this process's cgroups. It
// never fails: a controller it cannot find is simply absent from the map.
func detectCgroups(name string, trackUnified bool) *cgroupHost {
	mounts, _ := readFile("/proc/self/mountinfo")
	own, _ := readFile("/proc/self/cgroup")
	h := parseCgroups(strings.NewReader(mounts), strings.NewReader(own), name, trackUnified, func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return string(b)
	})
	h.place()
	return h
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// parseCgroups maps controllers to hierarchies from a mountinfo table and
// a /proc/self/cgroup table; v2Controllers reads the controllers a cgroup
// v2 folder offers. trackUnified sweeps on the unified hierarchy even
// where the controllers are v1 (for tests of the v2 sweep on hybrid hosts).
func parseCgroups(mountinfo, selfCgroup io.Reader, name string, trackUnified bool, v2Controllers func(dir string) string) *cgroupHost {
	h := &cgroupHost{ctl: map[string]*hierarchy{}, parents: map[*hierarchy]string{}, name: name}
	ownV1, ownV2 := map[string]string{}, "/"
	sc := bufio.NewScanner(selfCgroup)
	for sc.Scan() {
		// "ID:CONTROLLERS:PATH"; v2 is "0::PATH"
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			ownV2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			ownV1[c] = parts[2]
		}
	}
	var v2 *hierarchy
	v1 := map[string]*hierarchy{}
	mounts, _ := cgstat.ParseMounts(mountinfo)
	for _, m := range mounts {
		if m.Root != "/" {
			continue
		}
		if m.V2 {
			if v2 == nil {
				v2 = &hierarchy{mount: m.Dir, v2: true, own: ownV2}
			}
			continue
		}
		var hy *hierarchy
		for _, c := range m.Controllers {
			switch c {
			case ctlMemory, ctlCPU, ctlPids, ctlFreezer:
				if v1[c] == nil {
					if hy == nil {
						hy = &hierarchy{mount: m.Dir, own: cmp(ownV1[c], "/")}
					}
					v1[c] = hy
				}
			}
		}
	}
	if v2 != nil {
		for _, c := range strings.Fields(v2Controllers(filepath.Join(v2.mount, v2.own))) {
			if c == ctlMemory || c == ctlCPU || c == ctlPids {
				h.ctl[c] = v2
			}
		}
	}
	for _, c := range []string{ctlMemory, ctlCPU, ctlPids} {
		if h.ctl[c] == nil && v1[c] != nil {
			h.ctl[c] = v1[c]
		}
	}
	switch mem := h.ctl[ctlMemory]; {
	case mem != nil && mem.v2:
		h.track = mem
	case trackUnified && v2 != nil:
		h.track = v2
	default:
		h.track = v1[ctlFreezer]
	}
	return h
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// hierarchies lists each distinct hierarchy in use, once.
func (h *cgroupHost) hierarchies() []*hierarchy {
	var out []*hierarchy
	for _, c := range []string{ctlMemory, ctlCPU, ctlPids} {
		if hy := h.ctl[c]; hy != nil && !slices.Contains(out, hy) {
			out = append(out, hy)
		}
	}
	if h.track != nil && !slices.Contains(out, h.track) {
		out = append(out, h.track)
	}
	return out
}

// place decides where sandboxes go in each hierarchy: beneath this
// process's own cgroup, so that whatever confines airlock (a systemd
// slice, a Pod) confines its sandboxes too. A v1 cgroup can hold both
// processes and children. A v2 cgroup cannot (with controllers enabled):
// there, airlock moves itself into a leaf of its own cgroup when it is
// alone in it (a delegated cgroup); otherwise, or at the v2 root, the
// sandboxes go under a folder named after h.name at the hierarchy's root.
func (h *cgroupHost) place() {
	var notes []string
	for _, hy := range h.hierarchies() {
		dir, note := h.parentIn(hy)
		h.parents[hy] = dir
		if note != "" {
			notes = append(notes, note)
		}
	}
	h.placement = strings.Join(notes, "; ")
}

func (h *cgroupHost) parentIn(hy *hierarchy) (string, string) {
	atRoot := filepath.Join(hy.mount, h.name)
	if hy.own == "/" {
		return atRoot, ""
	}
	own := filepath.Join(hy.mount, hy.own)
	if !hy.v2 {
		return filepath.Join(own, h.name), "under airlock's own cgroup " + hy.own
	}
	if err := delegateOwn(own); err != nil {
		return atRoot, fmt.Sprintf("under %s at the root of %s: airlock's cgroup %s is not delegated to it (%v)", h.name, hy.mount, hy.own, err)
	}
	return filepath.Join(own, h.name), "under airlock's own delegated cgroup " + hy.own
}

// delegateOwn readies this process's own v2 cgroup to hold sandboxes: if
// the process is alone in it, it moves into a leaf "supervisor" and
// enables the controllers for the children.
func delegateOwn(own string) error {
	procs, err := os.ReadFile(filepath.Join(own, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	for _, p := range strings.Fields(string(procs)) {
		if p != self {
			return fmt.Errorf("process %s shares it", p)
		}
	}
	leaf := filepath.Join(own, "supervisor")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if len(procs) > 0 {
		if err := writeFile(leaf, "cgroup.procs", self); err != nil {
			return err
		}
	}
	return enableControllers(own)
}

// enableControllers turns on memory, cpu and pids (those offered) for the
// children of the v2 folder dir.
func enableControllers(dir string) error {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
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
		return nil
	}
	return writeFile(dir, "cgroup.subtree_control", strings.Join(want, " "))
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

// sweepMechanism says how a process's leftovers are killed, for doctor.
func (h *cgroupHost) sweepMechanism() string {
	switch {
	case h.track == nil:
		return "killed in a loop from the process's cgroup (no freezer, no cgroup v2)"
	case h.track.v2:
		return "cgroup.kill of the process's own cgroup v2 folder"
	}
	return "the process's own v1 freezer cgroup, frozen and killed"
}

// cgLimits are the caps written into a sandbox's cgroup.
type cgLimits struct {
	memory int64
	cpus   float64
	pids   int
	// initMemory is init's own memory cap: its reserve plus what file
	// operations write for the sandbox (the input and scratch tmpfs).
	initMemory int64
}

// cgroup is one sandbox's cgroup tree, spread over the hierarchies.
type cgroup struct {
	host *cgroupHost
	dirs map[*hierarchy]string // the sandbox's folder in each hierarchy
	reg  string                // its registry file, for CleanupStale
}

// create makes the sandbox's folder in every hierarchy and records it in
// the registry, so that a later airlock finds it if this one dies.
func (h *cgroupHost) create(name string) (*cgroup, error) {
	cg := &cgroup{host: h, dirs: map[*hierarchy]string{}}
	var paths []string
	for _, hy := range h.hierarchies() {
		dir, err := mkdirParent(hy, h.parents[hy], name)
		if err != nil {
			_ = cg.remove()
			return nil, err
		}
		cg.dirs[hy] = dir
		paths = append(paths, dir)
	}
	reg, err := register(name, paths)
	if err != nil {
		_ = cg.remove()
		return nil, err
	}
	cg.reg = reg
	return cg, nil
}

// mkdirParent creates parent/name, creating parent if needed (and, on v2,
// enabling the controllers down to it). Another airlock may remove an
// empty parent at any moment, so ENOENT is retried.
func mkdirParent(hy *hierarchy, parent, name string) (string, error) {
	dir := filepath.Join(parent, name)
	var err error
	for range 20 {
		if err = os.MkdirAll(parent, 0o755); err != nil {
			return "", fmt.Errorf("cgroup %s: %w", parent, err)
		}
		if hy.v2 {
			if err = enableChain(hy, parent); err != nil {
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

// enableChain enables the controllers in every v2 folder from the
// hierarchy's root (or this process's delegated cgroup) down to dir.
func enableChain(hy *hierarchy, dir string) error {
	top := hy.mount
	if own := filepath.Join(hy.mount, hy.own); hy.own != "/" && strings.HasPrefix(dir, own+"/") {
		top = own
	}
	rel, err := filepath.Rel(top, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("cgroup %s is not below %s", dir, top)
	}
	cur := top
	for _, part := range append([]string{"."}, strings.Split(rel, "/")...) {
		cur = filepath.Join(cur, part)
		if err := enableControllers(cur); err != nil {
			return fmt.Errorf("cgroup %s: %w", cur, err)
		}
	}
	return nil
}

func (cg *cgroup) each(f func(hy *hierarchy, dir string) error) error {
	for _, hy := range cg.host.hierarchies() {
		if d, ok := cg.dirs[hy]; ok {
			if err := f(hy, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepare makes the init and procs folders before init starts, and hands
// the sandbox's v2 folder to the sandbox's root (owner: host id owner),
// so that init may start processes below it: CLONE_INTO_CGROUP checks the
// caller's write access to the target and to the common ancestor of
// source and target.
func (cg *cgroup) prepare(owner int) error {
	return cg.each(func(hy *hierarchy, d string) error {
		for _, sub := range []string{cgInit, cgProcs} {
			if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
				return fmt.Errorf("cgroup: %w", err)
			}
		}
		if !hy.v2 {
			return nil
		}
		for _, dir := range []string{d, filepath.Join(d, cgProcs)} {
			if err := enableControllers(dir); err != nil {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
		}
		return os.Chown(filepath.Join(d, "cgroup.procs"), owner, owner)
	})
}

// initDir opens init's v2 folder for CLONE_INTO_CGROUP, where the host
// has one; nil otherwise.
func (cg *cgroup) initDir() (*os.File, error) {
	for hy, d := range cg.dirs {
		if hy.v2 {
			f, err := os.OpenFile(filepath.Join(d, cgInit), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("cgroup: %w", err)
			}
			return f, nil
		}
	}
	return nil, nil
}

// placeInit moves init into its folder in every v1 hierarchy (it started
// in its v2 folder already). A migration waits for the kernel's RCU grace
// period, milliseconds on hosts whose cgroup2 mount lacks favordynmods, so
// callers run it beside init's boot.
func (cg *cgroup) placeInit(pid int) error {
	return cg.each(func(hy *hierarchy, d string) error {
		if hy.v2 {
			return nil
		}
		return writeFile(filepath.Join(d, cgInit), "cgroup.procs", strconv.Itoa(pid))
	})
}

// setLimits writes the policy's caps on procs and init's reserve.
func (cg *cgroup) setLimits(lim cgLimits) error {
	if d, ok := cg.dir(ctlMemory); ok {
		v2 := cg.host.ctl[ctlMemory].v2
		if err := setMemory(filepath.Join(d, cgProcs), lim.memory, v2); err != nil {
			return err
		}
		if !v2 {
			// v1 leaves socket buffers out of the memory counter; a TCP
			// cap of its own, as large, bounds them.
			if err := writeFile(filepath.Join(d, cgProcs), "memory.kmem.tcp.limit_in_bytes", strconv.FormatInt(max(lim.memory/4, 4<<20), 10)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := setMemory(filepath.Join(d, cgInit), lim.initMemory, v2); err != nil {
			return err
		}
	}
	if d, ok := cg.dir(ctlCPU); ok {
		const period = 100000
		quota := max(1000, int64(lim.cpus*period))
		d = filepath.Join(d, cgProcs)
		var err error
		if cg.host.ctl[ctlCPU].v2 {
			err = writeFile(d, "cpu.max", fmt.Sprintf("%d %d", quota, period))
		} else if err = writeFile(d, "cpu.cfs_period_us", strconv.Itoa(period)); err == nil {
			err = writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
		}
		if err != nil {
			return err
		}
	}
	if d, ok := cg.dir(ctlPids); ok {
		if err := writeFile(filepath.Join(d, cgProcs), "pids.max", strconv.Itoa(lim.pids)); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(d, cgInit), "pids.max", strconv.Itoa(initPids)); err != nil {
			return err
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

func writeFile(dir, name, val string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	return nil
}

// setMemory caps memory in folder d and forbids swap.
func setMemory(d string, bytes int64, v2 bool) error {
	v := strconv.FormatInt(bytes, 10)
	if v2 {
		if err := writeFile(d, "memory.max", v); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
			return writeFile(d, "memory.swap.max", "0")
		}
		return nil
	}
	// v1: memsw (memory+swap) must stay >= limit; the limit goes first
	// on a fresh folder.
	if err := writeFile(d, "memory.limit_in_bytes", v); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
		return writeFile(d, "memory.memsw.limit_in_bytes", v)
	}
	return writeFile(d, "memory.swappiness", "0")
}

// procCgroup is one process's folder under procs, in every hierarchy.
type procCgroup struct {
	host *cgroupHost
	dirs map[*hierarchy]string
	stat *cgstat.Group
}

// newProc makes the folder of process name, and opens what init needs to
// start the process there: the v1 folders' "tasks" files and the v2
// folder itself (tasks, dir), which the caller closes. owner is the host
// id of the sandbox's root, who gets the v2 folder's cgroup.procs.
func (cg *cgroup) newProc(name string, owner int) (p *procCgroup, tasks []*os.File, dir *os.File, err error) {
	p = &procCgroup{host: cg.host, dirs: map[*hierarchy]string{}}
	defer func() {
		if err != nil {
			for _, f := range tasks {
				f.Close()
			}
			if dir != nil {
				dir.Close()
			}
			_ = p.remove(0) // nothing ran in it
		}
	}()
	err = cg.each(func(hy *hierarchy, d string) error {
		pd := filepath.Join(d, cgProcs, name)
		if err := os.Mkdir(pd, 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		p.dirs[hy] = pd
		if hy.v2 {
			if err := os.Chown(filepath.Join(pd, "cgroup.procs"), owner, owner); err != nil {
				return fmt.Errorf("cgroup: %w", err)
			}
			f, err := os.OpenFile(pd, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				return fmt.Errorf("cgroup: %w", err)
			}
			dir = f
			return nil
		}
		if hy == cg.host.ctl[ctlMemory] {
			// v1 counts a socket's TCP buffers only if its own memory
			// cgroup has a TCP limit; the sum is capped in procs
			if err := writeFile(pd, "memory.kmem.tcp.limit_in_bytes", "-1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		f, err := os.OpenFile(filepath.Join(pd, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		tasks = append(tasks, f)
		return nil
	})
	if err != nil {
		return p, tasks, dir, err
	}
	dirs, v2 := map[string]string{}, map[string]bool{}
	for _, c := range []string{ctlMemory, ctlCPU, ctlPids} {
		if hy := cg.host.ctl[c]; hy != nil {
			dirs[c], v2[c] = p.dirs[hy], hy.v2
		}
	}
	p.stat = cgstat.New(dirs, v2)
	if d, ok := cg.dir(ctlPids); ok {
		p.stat.CountPidsEventsOf(filepath.Join(d, cgProcs))
	}
	return p, tasks, dir, nil
}

// A sweep waits for the processes it killed as long as their number keeps
// falling: on a loaded host, each of a fork bomb's copies of a large
// process (Python with pandas loaded) can take a second or more to free
// its memory, so a hundred of them take far longer than any one. It gives
// up when none ended for sweepStall, or at sweepTimeout.
const (
	sweepStall   = 10 * time.Second
	sweepTimeout = 2 * time.Minute
)

// progress tells a sweep's wait loop when to give up.
type progress struct {
	last            int64
	stall, deadline time.Time
}

func newProgress(deadline time.Time) *progress {
	return &progress{last: -1, deadline: deadline}
}

// stuck takes the number still left and says whether to give up, and why.
func (p *progress) stuck(n int64) (bool, string) {
	now := time.Now()
	if p.last < 0 || n < p.last {
		p.last, p.stall = n, now.Add(sweepStall)
	}
	switch {
	case now.After(p.deadline):
		return true, fmt.Sprintf("after %v", sweepTimeout)
	case now.After(p.stall):
		return true, fmt.Sprintf("none ended for %v", sweepStall)
	}
	return false, ""
}

// sweep kills everything in the process's folder but init and waits
// until nothing else is left there. On cgroup v1, init's thread that
// forked the process joined the folder's tasks to do so, and may not have
// left yet: the folder then lists init's pid, which must never be killed.
func (p *procCgroup) sweep(initPid int) error {
	deadline := time.Now().Add(sweepTimeout)
	if t := p.host.track; t != nil && p.dirs[t] != "" {
		d := p.dirs[t]
		if t.v2 {
			if err := writeFile(d, "cgroup.kill", "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		} else if err := freezeAndKill(d, initPid); err != nil {
			return err
		}
	}
	for _, d := range p.dirs {
		if err := killUntilEmpty(d, initPid, deadline); err != nil {
			return err
		}
	}
	if hy := p.host.ctl[ctlPids]; hy != nil && p.dirs[hy] != "" {
		return waitReaped(p.dirs[hy], hy.v2, deadline)
	}
	return nil
}

// waitReaped waits until the killed tasks of pids folder d are reaped: a
// killed process whose parent died is a zombie until init reaps it, and
// until then it still counts against the sandbox's pids cap (pids.current)
// though no folder lists it. After a fork bomb, the next command would
// otherwise fail to start. Live tasks listed in the folder (init's thread
// that has not left it yet, on v1) are not waited for.
func waitReaped(d string, v2 bool, deadline time.Time) error {
	list := "tasks"
	if v2 {
		list = "cgroup.procs"
	}
	pr := newProgress(deadline)
	for wait := 50 * time.Microsecond; ; wait = min(wait*2, 5*time.Millisecond) {
		n, ok := readCount(filepath.Join(d, "pids.current"))
		if !ok {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(d, list))
		if n <= int64(len(strings.Fields(string(b)))) {
			return nil
		}
		if stuck, why := pr.stuck(n); stuck {
			return fmt.Errorf("cgroup %s: %d tasks not reaped, %s", d, n, why)
		}
		time.Sleep(wait)
	}
}

// readCount reads a file holding one number.
func readCount(p string) (int64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// freezeWait bounds the wait for a v1 freezer folder to be frozen.
const freezeWait = 200 * time.Millisecond

// freezeAndKill keeps what is in a v1 freezer folder from forking while
// it is killed: it asks the folder to freeze, kills everything it lists
// (a frozen task dies once thawed), and thaws it, always. It waits for
// the freeze only a moment: under load, a fork bomb's tasks in the middle
// of a fork take seconds to freeze; a task not frozen yet has the kill
// pending, which ends its fork, and what it forked meanwhile is frozen at
// birth and killed by the sweep's next pass.
func freezeAndKill(d string, spare int) error {
	if err := writeFile(d, "freezer.state", "FROZEN"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for until := time.Now().Add(freezeWait); time.Now().Before(until); time.Sleep(100 * time.Microsecond) {
		b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
		if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
			break
		}
	}
	killCgroupProcs(d, spare)
	return writeFile(d, "freezer.state", "THAWED")
}

// killUntilEmpty kills what is in folder d, but process spare, until no
// other process is left in it, while they keep ending.
func killUntilEmpty(d string, spare int, deadline time.Time) error {
	pr := newProgress(deadline)
	for wait := 50 * time.Microsecond; ; wait = min(wait*2, 5*time.Millisecond) {
		n := killCgroupProcs(d, spare)
		if n == 0 {
			return nil
		}
		if stuck, why := pr.stuck(int64(n)); stuck {
			return fmt.Errorf("cgroup %s: %d processes still running, %s", d, n, why)
		}
		time.Sleep(wait)
	}
}

// killCgroupProcs sends SIGKILL to every process listed in folder d but
// spare (0: none) and says how many it found.
func killCgroupProcs(d string, spare int) int {
	b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	n := 0
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != spare {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// remove deletes the process's folders; they must be empty.
func (p *procCgroup) remove(spare int) error {
	var errs []error
	for _, d := range p.dirs {
		errs = append(errs, removeCgroupDir(d, spare))
	}
	return errors.Join(errs...)
}

// remove kills anything still inside and removes the sandbox's folders,
// deepest first, then the registry entry and the shared parent folder if
// it is empty.
func (cg *cgroup) remove() error {
	var errs []error
	for hy, d := range cg.dirs {
		errs = append(errs, removeTree(d))
		_ = os.Remove(cg.host.parents[hy])
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if cg.reg != "" {
		_ = os.Remove(cg.reg)
	}
	return nil
}

// removeTree kills what is in a cgroup folder and its children and
// removes them, children first.
func removeTree(d string) error {
	ents, err := os.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, removeTree(filepath.Join(d, e.Name())))
		}
	}
	errs = append(errs, removeCgroupDir(d, 0))
	return errors.Join(errs...)
}

// removeCgroupDir empties and removes one cgroup folder, killing what is
// left in it but process spare. The last tasks of a killed sandbox (and a
// thread of init that is leaving) may take a moment to go, so EBUSY is
// retried.
func removeCgroupDir(d string, spare int) error {
	var err error
	for i := range 200 {
		if err = os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		killCgroupProcs(d, spare)
		time.Sleep(time.Duration(min(i+1, 20)) * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}

// registryDir holds one file per live native sandbox, named like its
// cgroup folder and listing those folders: a later airlock removes the
// folders of dead owners from it, wherever they were placed. Rootless
// sandboxes have no registry; their cgroup parents are scanned instead.
const registryDir = "/run/airlock/native"

func register(name string, dirs []string) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	if err := os.MkdirAll(registryDir, 0o700); err != nil {
		return "", fmt.Errorf("sandbox registry: %w", err)
	}
	p := filepath.Join(registryDir, name)
	if err := os.WriteFile(p, []byte(strings.Join(dirs, "\n")+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("sandbox registry: %w", err)
	}
	return p, nil
}

// cleanupStale removes the cgroups of airlock processes that died without
// cleaning up (killed with SIGKILL, say): those in the registry, and
// those under the parent folders this host places sandboxes in. Sandboxes
// of live processes are left alone.
func (h *cgroupHost) cleanupStale() []string {
	var removed []string
	ents, _ := os.ReadDir(registryDir)
	for _, e := range ents {
		owner, _, ok := hostdir.SplitName(e.Name())
		if !ok || hostdir.OwnerAlive(owner) {
			continue
		}
		p := filepath.Join(registryDir, e.Name())
		b, _ := os.ReadFile(p)
		clean := true
		for _, d := range strings.Fields(string(b)) {
			if !isCgroupDir(d) {
				continue // gone, or not a cgroup folder: never touch it
			}
			if removeTree(d) == nil {
				removed = append(removed, d)
			} else {
				clean = false
			}
		}
		if clean {
			_ = os.Remove(p)
		}
	}
	for _, parent := range h.parents {
		kids, _ := os.ReadDir(parent)
		for _, e := range kids {
			owner, _, ok := hostdir.SplitName(e.Name())
			if !e.IsDir() || !ok || hostdir.OwnerAlive(owner) {
				continue
			}
			d := filepath.Join(parent, e.Name())
			if removeTree(d) == nil {
				removed = append(removed, d)
			}
		}
		_ = os.Remove(parent)
	}
	return removed
}

// isCgroupDir tells whether d is a folder on a cgroup file system.
func isCgroupDir(d string) bool {
	var st unix.Statfs_t
	if unix.Statfs(d, &st) != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}
