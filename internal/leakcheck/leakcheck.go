// Package leakcheck finds what sandboxes left on the host, for the leak
// checks of tests and benchmarks.
package leakcheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cgroups lists the sandbox cgroup folders that the airlock processes pids own,
// wherever they were placed: backends name them PID-START-ID inside a
// folder called "airlock" (native) or "airlock-…" (other backends), which
// sits at a hierarchy's root or, when airlock places its sandboxes under
// its own cgroup, deeper. Every mounted hierarchy is searched.
func Cgroups(pids ...int) []string {
	ours := map[string]bool{}
	for _, p := range pids {
		ours[strconv.Itoa(p)] = true
	}
	var out []string
	for _, root := range mounts() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			name := d.Name()
			if name != "airlock" && !strings.HasPrefix(name, "airlock-") {
				return nil
			}
			kids, _ := os.ReadDir(p)
			for _, k := range kids {
				owner, _, _ := strings.Cut(k.Name(), "-")
				if k.IsDir() && ours[owner] {
					out = append(out, filepath.Join(p, k.Name()))
				}
			}
			return fs.SkipDir
		})
	}
	return out
}

// mounts lists the mount points of the cgroup hierarchies.
func mounts() []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var roots []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && (f[i+1] == "cgroup" || f[i+1] == "cgroup2") && len(f) > 4 {
				roots = append(roots, f[4])
			}
		}
	}
	return roots
}

// Inits lists the sandbox init processes (native's, named
// airlock-sandbox-init) whose parent is pid, as "process PID: COMMAND".
func Inits(pid int) []string {
	var out []string
	for _, p := range InitPids(pid) {
		b, _ := os.ReadFile(filepath.Join("/proc", p, "cmdline"))
		out = append(out, "process "+p+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// InitPids lists the pids of the sandbox init processes whose parent is
// pid.
func InitPids(pid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), "airlock-sandbox-init") && parentOf(e.Name()) == pid {
			out = append(out, e.Name())
		}
	}
	return out
}

// parentOf reads a process's parent pid; 0 if it is gone.
func parentOf(pid string) int {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
