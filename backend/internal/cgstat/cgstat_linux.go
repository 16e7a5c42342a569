package cgstat

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Controllers read. cpuacct exists only in v1; v2 counts CPU time in cpu.
const (
	memory  = "memory"
	cpu     = "cpu"
	cpuacct = "cpuacct"
	pids    = "pids"
)

// Group is the set of cgroup folders, one per controller, that a process
// belongs to.
type Group struct {
	dirs map[string]string
	v2   map[string]bool
	// morePids is another folder whose pids.events count too: where the
	// cap is, when the group's own pids folder is below it.
	morePids string
}

// Stats are the counters of a group at one moment.
type Stats struct {
	OOMKills  int64
	PidsMax   int64
	CPUNanos  int64
	PeakBytes int64
	HasCPU    bool
	HasPeak   bool
}

// New makes a group of known folders: dirs maps a controller (memory,
// cpu, cpuacct, pids) to its folder, v2 says which of them are cgroup v2.
func New(dirs map[string]string, v2 map[string]bool) *Group {
	return &Group{dirs: dirs, v2: v2}
}

// CountPidsEventsOf makes the group's pids events include those of folder
// dir too. A failed fork is counted in the folder that forked on cgroup
// v1 (since Linux 6.10) and in the folder whose cap was hit on v2 and on
// older kernels; a process's folder below its sandbox's cap reads both.
func (g *Group) CountPidsEventsOf(dir string) { g.morePids = dir }

// Mount is one mounted cgroup hierarchy.
type Mount struct {
	Root, Dir   string // the hierarchy's path that is mounted, and where
	V2          bool
	Controllers []string // v1: the controllers it carries
}

// ForPID finds the cgroups of pid on this host: each controller is taken
// from the v1 hierarchy that carries it, else from the unified one, the
// way /proc/PID/cgroup lists them.
func ForPID(pid int) (*Group, error) {
	mounts, err := selfMounts()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cgroups of process %d: %w", pid, err)
	}
	defer f.Close()
	g := &Group{dirs: map[string]string{}, v2: map[string]bool{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "ID:CONTROLLERS:PATH"; v2 is "0::PATH"
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			g.addV2(mounts, parts[2])
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if m := findV1(mounts, c); m != nil {
				if d, ok := m.path(parts[2]); ok {
					g.dirs[c] = d
				}
			}
		}
	}
	if len(g.dirs) == 0 {
		return nil, fmt.Errorf("process %d: no cgroup folder found", pid)
	}
	return g, nil
}

// addV2 takes from the unified hierarchy the controllers no v1 hierarchy
// gave.
func (g *Group) addV2(mounts []Mount, p string) {
	for _, m := range mounts {
		if !m.V2 {
			continue
		}
		d, ok := m.path(p)
		if !ok {
			return
		}
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
		for _, c := range strings.Fields(string(b)) {
			if _, taken := g.dirs[c]; !taken && (c == memory || c == cpu || c == pids) {
				g.dirs[c] = d
				g.v2[c] = true
			}
		}
		return
	}
}

func findV1(mounts []Mount, ctl string) *Mount {
	for i, m := range mounts {
		for _, c := range m.Controllers {
			if c == ctl {
				return &mounts[i]
			}
		}
	}
	return nil
}

// path maps a cgroup path to the folder that shows it, if this mount
// shows it.
func (m Mount) path(p string) (string, bool) {
	rel, err := filepath.Rel(m.Root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join(m.Dir, rel), true
}

// selfMounts reads the cgroup mounts of this process's mount table.
func selfMounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMounts(f)
}

// ParseMounts reads the cgroup mounts of a mount table in the form of
// /proc/PID/mountinfo.
func ParseMounts(mountinfo io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		m := Mount{Root: fields[3], Dir: fields[4]}
		switch fields[sep+1] {
		case "cgroup2":
			m.V2 = true
		case "cgroup":
			m.Controllers = strings.Split(fields[sep+3], ",")
		default:
			continue
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Stats reads the counters. Missing files read as zero, with HasCPU and
// HasPeak telling whether those two were there.
func (g *Group) Stats() Stats {
	var s Stats
	if d, ok := g.dirs[memory]; ok {
		if g.v2[memory] {
			s.OOMKills = keyed(filepath.Join(d, "memory.events"), "oom_kill")
			s.PeakBytes, s.HasPeak = number(filepath.Join(d, "memory.peak"))
		} else {
			s.OOMKills = keyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
			s.PeakBytes, s.HasPeak = number(filepath.Join(d, "memory.max_usage_in_bytes"))
		}
	}
	if d, ok := g.dirs[pids]; ok {
		s.PidsMax = keyed(filepath.Join(d, "pids.events"), "max")
	}
	if g.morePids != "" {
		s.PidsMax += keyed(filepath.Join(g.morePids, "pids.events"), "max")
	}
	if d, ok := g.dirs[cpu]; ok && g.v2[cpu] {
		s.CPUNanos = keyed(filepath.Join(d, "cpu.stat"), "usage_usec") * 1000
		s.HasCPU = true
	} else if d, ok := g.dirs[cpuacct]; ok {
		s.CPUNanos, s.HasCPU = number(filepath.Join(d, "cpuacct.usage"))
	}
	return s
}

// ResetPeak restarts peak-memory tracking where the kernel allows it (v1
// always, v2 since Linux 6.12).
func (g *Group) ResetPeak() {
	d, ok := g.dirs[memory]
	if !ok {
		return
	}
	if g.v2[memory] {
		_ = os.WriteFile(filepath.Join(d, "memory.peak"), []byte("reset"), 0)
	} else {
		_ = os.WriteFile(filepath.Join(d, "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
}

// Usage measures one command: Begin before it starts, Fill after it
// ends.
type Usage struct {
	g      *Group
	before Stats
}

// Begin restarts peak-memory tracking and takes the counters. A nil group
// gives a Usage whose Fill leaves the Result as it is.
func Begin(g *Group) Usage {
	if g == nil {
		return Usage{}
	}
	g.ResetPeak()
	return Usage{g: g, before: g.Stats()}
}

// Fill writes into res the CPU time and peak memory since Begin, where
// the group counts them, and whether the memory or pids cap was hit.
func (u Usage) Fill(res *sandbox.Result) {
	if u.g == nil {
		return
	}
	after := u.g.Stats()
	if after.HasCPU {
		res.Usage.CPUMillis = float64(after.CPUNanos-u.before.CPUNanos) / 1e6
	}
	if after.HasPeak {
		res.Usage.PeakMemoryBytes = after.PeakBytes
	}
	res.OOMKilled = after.OOMKills > u.before.OOMKills
	res.PidsLimitHit = after.PidsMax > u.before.PidsMax
}

// Procs lists the host pids of the processes in the group, as the pids
// controller's folder (else any folder) lists them.
func (g *Group) Procs() ([]int, error) {
	d, ok := g.dirs[pids]
	if !ok {
		for _, any := range g.dirs {
			d = any
			break
		}
	}
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Tasks is the number of tasks the pids controller counts, zombies not
// yet reaped included; false without the pids controller.
func (g *Group) Tasks() (int64, bool) {
	d, ok := g.dirs[pids]
	if !ok {
		return 0, false
	}
	return number(filepath.Join(d, "pids.current"))
}

// Describe says where each controller was found, for diagnostics.
func (g *Group) Describe() string {
	var parts []string
	for _, c := range []string{memory, cpu, cpuacct, pids} {
		if d, ok := g.dirs[c]; ok {
			v := "v1"
			if g.v2[c] {
				v = "v2"
			}
			parts = append(parts, fmt.Sprintf("%s %s %s", c, v, d))
		}
	}
	return strings.Join(parts, "; ")
}

func number(p string) (int64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// keyed reads "key value" lines and returns key's value, 0 if absent.
func keyed(p, key string) int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// RemoveEmpty removes the folder rel (such as "airlock-gvisor") under the
// root of every mounted cgroup hierarchy where it exists and is empty: a
// parent that runtimes leave once the last sandbox below it is gone.
func RemoveEmpty(rel string) {
	mounts, err := selfMounts()
	if err != nil {
		return
	}
	for _, m := range mounts {
		if m.Root == "/" {
			_ = os.Remove(filepath.Join(m.Dir, rel))
		}
	}
}
