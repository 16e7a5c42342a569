package microvm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Leftovers lists what the machines of airlock process pid left on the
// host: QEMU processes and cgroup folders named after it. The machines
// have no socket or disk file of their own to leave: the channel is a
// socket pair, and the only files are the shared cached boot files.
func Leftovers(pid int) []string {
	var out []string
	mine := fmt.Sprintf("%s%d-", namePrefix, pid)
	for _, p := range machines() {
		if strings.HasPrefix(p.name, mine) {
			out = append(out, fmt.Sprintf("qemu process %d (%s)", p.pid, p.name))
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && (f[i+1] == "cgroup" || f[i+1] == "cgroup2") {
				// the folder lies at the hierarchy's root or under airlock's own cgroup
				var kids []string
				for _, depth := range []string{"", "*", "*/*", "*/*/*"} {
					k, _ := filepath.Glob(filepath.Join(f[4], depth, "airlock-microvm", fmt.Sprintf("%d-*", pid)))
					kids = append(kids, k...)
				}
				for _, k := range kids {
					if st, err := os.Stat(k); err == nil && st.IsDir() {
						out = append(out, "cgroup "+k)
					}
				}
			}
		}
	}
	return out
}
