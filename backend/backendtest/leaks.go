//go:build linux

package backendtest

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Main runs a backend's tests, then checks that nothing was left behind:
// no process the tests started, no open descriptor, no goroutine, no new
// mount or temp folder named after this process, and nothing the
// backend's own leftovers function reports. Use it from TestMain.
//
// Other test binaries run at the same time (go test runs packages in
// parallel), so host-wide state is judged by name: a backend names the
// mounts and folders it makes on the host with its owner prefix
// "PID-STARTTIME-", and only those with this process's PID count here.
func Main(m *testing.M, leftovers func() []string) int {
	before := takeSnapshot()
	code := m.Run()
	problems := checkLeaks(before, leftovers)
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "LEAK CHECK FAILED: the tests left these behind:")
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "  "+p)
		}
		return 1
	}
	fmt.Println("leak check: nothing left behind (processes, mounts, cgroups, temp folders, descriptors, goroutines)")
	return code
}

// snapshot is the state the leak check compares against.
type snapshot struct {
	fds        map[string]string
	mounts     map[string]bool
	temps      map[string]bool
	goroutines int
}

func takeSnapshot() snapshot {
	return snapshot{fds: openFDs(), mounts: mountSet(), temps: tempSet(), goroutines: runtime.NumGoroutine()}
}

func checkLeaks(before snapshot, leftovers func() []string) []string {
	var problems []string
	// Goroutines and descriptors of finished sandboxes may take a moment
	// to wind down; give them a few seconds before judging.
	deadline := time.Now().Add(10 * time.Second)
	for {
		problems = problems[:0]
		if kids := childProcesses(); len(kids) > 0 {
			problems = append(problems, "child processes: "+strings.Join(kids, "; "))
		}
		now := openFDs()
		for fd, target := range now {
			// the Go runtime's network poller opens these on first use
			if target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" {
				continue
			}
			if _, ok := before.fds[fd]; !ok {
				problems = append(problems, fmt.Sprintf("descriptor %s -> %s", fd, target))
			}
		}
		mine := fmt.Sprintf("/%d-", os.Getpid())
		for m := range mountSet() {
			if !before.mounts[m] && strings.Contains(m, mine) {
				problems = append(problems, "mount "+m)
			}
		}
		for tmp := range tempSet() {
			if !before.temps[tmp] && strings.Contains("/"+tmp, mine) {
				problems = append(problems, "temp folder "+tmp)
			}
		}
		if n := runtime.NumGoroutine(); n > before.goroutines+2 {
			problems = append(problems, fmt.Sprintf("%d goroutines, %d before the tests", n, before.goroutines))
		}
		if leftovers != nil {
			problems = append(problems, leftovers()...)
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(problems) > 0 {
		buf := make([]byte, 1<<20)
		problems = append(problems, "goroutines:\n"+string(buf[:runtime.Stack(buf, true)]))
	}
	sort.Strings(problems)
	return problems
}

func openFDs() map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out[e.Name()] = target
	}
	return out
}

// mountSet lists this process's mounts by mount point and source.
func mountSet() map[string]bool {
	out := map[string]bool{}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out[f[4]+" ("+f[3]+")"] = true
		}
	}
	return out
}

// tempSet lists the temp folder's entries.
func tempSet() map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(os.TempDir())
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// childProcesses lists the live children of this process.
func childProcesses() []string {
	self := strconv.Itoa(os.Getpid())
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == self && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[:i+1])
		}
	}
	return out
}
