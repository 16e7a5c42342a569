package agent

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// orphanEvery is how often init looks for orphans to kill.
const orphanEvery = 200 * time.Millisecond

// fatalSignals are those with which the Go runtime would end or dump the
// program. A pid 1 gets from inside its pid namespace only the signals it
// handles, so ignoring them leaves the code no signal that ends init.
var fatalSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGSTKFLT, syscall.SIGIO, syscall.SIGPWR}

// runInit is a container's pid 1: "init [--install PATH]". With --install
// it first copies its own binary to PATH (atomically: a temporary name,
// then a rename). It reaps every child and kills each orphan that comes
// to it, unless that orphan is one of the agent's own processes.
func runInit(args []string) int {
	signal.Ignore(fatalSignals...)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if len(args) == 2 && args[0] == "--install" {
		if err := install(args[1]); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-k8s-agent: install: %v\n", err)
			return 1
		}
	} else if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: airlock-k8s-agent init [--install PATH]")
		return 2
	}
	self, _ := os.Readlink("/proc/self/exe")
	go func() {
		for range time.Tick(orphanEvery) {
			killOrphans(self)
		}
	}()
	for {
		_, err := unix.Wait4(-1, nil, 0, nil)
		if err == unix.ECHILD {
			time.Sleep(orphanEvery)
		}
	}
}

// install copies the running binary to dst.
func install(dst string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := filepath.Join(filepath.Dir(dst), ".agent-"+strconv.Itoa(os.Getpid()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// killOrphans kills init's children that are not the agent: what reaches
// init is an orphan whose shepherd died. The agent's own processes (the
// exec API starts them as init's children) are spared.
func killOrphans(self string) {
	me := os.Getpid()
	table, _ := processes() // a table not read is read again next round
	for _, p := range table {
		if p.ppid != me || p.zombie {
			continue
		}
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(p.pid) + "/exe"); err == nil && exe == self {
			continue
		}
		_ = unix.Kill(p.pid, unix.SIGKILL)
	}
}

// proc is one line of the process table.
type proc struct {
	pid, ppid, sid int
	zombie         bool // Z or X: dead, not yet reaped
	stopped        bool // T or t: it runs nothing, and forks nothing
}

// processes reads the process table from /proc; nil, err when /proc
// could not be listed.
func processes() ([]proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]proc, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses
		s := string(b)
		k := strings.LastIndexByte(s, ')')
		if k < 0 {
			continue
		}
		f := strings.Fields(s[k+1:])
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		sid, _ := strconv.Atoi(f[3])
		out = append(out, proc{pid: pid, ppid: ppid, sid: sid, zombie: f[0] == "Z" || f[0] == "X", stopped: f[0] == "T" || f[0] == "t"})
	}
	return out, nil
}

// descendants lists the live processes below pid in table.
func descendants(table []proc, pid int) []int {
	kids := map[int][]proc{}
	for _, p := range table {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	var out []int
	seen := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		for _, c := range kids[q] {
			if seen[c.pid] { // the table is read one file at a time, while pids come and go
				continue
			}
			seen[c.pid] = true
			queue = append(queue, c.pid)
			if !c.zombie {
				out = append(out, c.pid)
			}
		}
	}
	return out
}
