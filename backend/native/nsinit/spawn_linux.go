package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Init starts every command itself: a fresh OS thread takes on all the
// restrictions a command runs under, forks the command, and is retired.
// Init's other threads keep their privileges to serve the supervisor.

// ExecSpec is one command as the supervisor asks for it.
type ExecSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// CgroupTasks is how many of the descriptors after the spec are the
	// "tasks" files of cgroup v1 folders the command starts in: the thread
	// that forks it joins each first.
	CgroupTasks int `json:"cgroup_tasks,omitempty"`
	// CgroupDir says the last descriptor is a cgroup v2 folder the command
	// starts in (CLONE_INTO_CGROUP).
	CgroupDir bool `json:"cgroup_dir,omitempty"`
}

// execCgroups are the cgroups one command starts in.
type execCgroups struct {
	tasks []*os.File // v1 "tasks" files
	dir   *os.File   // a v2 folder, or nil
}

// cgroups sorts the descriptors that follow the spec.
func (s ExecSpec) cgroups(files []*os.File) (execCgroups, error) {
	want := s.CgroupTasks
	if s.CgroupDir {
		want++
	}
	if len(files) != want {
		return execCgroups{}, fmt.Errorf("exec: want %d cgroup descriptors, got %d", want, len(files))
	}
	cg := execCgroups{tasks: files[:s.CgroupTasks]}
	if s.CgroupDir {
		cg.dir = files[s.CgroupTasks]
	}
	return cg, nil
}

// Limits are set once on init and inherited by every command.
type Limits struct {
	UID       int  `json:"uid"`
	GID       int  `json:"gid"`
	SetGroups bool `json:"set_groups"`
	// Rlimits are set on init and inherited by every command.
	Rlimits []Rlimit `json:"rlimits"`
	// CommandRlimits would stop init itself (its Go runtime needs more
	// address space than a small memory cap), so they are set on each
	// command with prlimit just after it starts.
	CommandRlimits []Rlimit        `json:"command_rlimits,omitempty"`
	Landlock       *LandlockConfig `json:"landlock,omitempty"`
	// OOMScoreAdj is raised for commands so that, under memory pressure on
	// the host, sandboxed code is killed first.
	OOMScoreAdj int `json:"oom_score_adj"`
	// NoInetDatagrams makes seccomp refuse UDP sockets (cgroup v1 hosts,
	// whose memory cap cannot count their buffers).
	NoInetDatagrams bool `json:"no_inet_datagrams,omitempty"`
}

// Rlimit is one resource limit.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// LandlockConfig is the Landlock part of the limits.
type LandlockConfig struct {
	ABI      int      `json:"abi"`
	ReadOnly []string `json:"read_only"`
	Writable []string `json:"writable"`
	Devices  []string `json:"devices"`
}

// ExecStatus is init's one report about a command, on its status pipe.
type ExecStatus struct {
	// Error is set when the command could not start; ExitCode is then 126
	// (not executable) or 127 (not found), as a shell would say.
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	// CPU time and peak RSS of the command and the children it waited for.
	UserMicros int64 `json:"user_us"`
	SysMicros  int64 `json:"sys_us"`
	MaxRSS     int64 `json:"max_rss_bytes"`
}

// applyLimits sets the sandbox-wide rlimits on init, to be inherited.
func applyLimits(l *Limits) error {
	for _, rl := range l.Rlimits {
		lim := unix.Rlimit{Cur: rl.Cur, Max: rl.Max}
		if err := unix.Setrlimit(rl.Resource, &lim); err != nil {
			return fmt.Errorf("setrlimit %d: %w", rl.Resource, err)
		}
	}
	return nil
}

// spawner holds what every command of the sandbox is started with,
// prepared once.
type spawner struct {
	limits  *Limits
	filter  []unix.SockFilter
	ruleset int // Landlock ruleset, or -1
}

func newSpawner(l *Limits) (*spawner, error) {
	filter, err := buildFilter(seccompArch, syscallTable, x32Bit, filterOptions{noInetDatagrams: l.NoInetDatagrams})
	if err != nil {
		return nil, err
	}
	sp := &spawner{limits: l, filter: filter, ruleset: -1}
	if l.Landlock != nil {
		if sp.ruleset, err = buildRuleset(l.Landlock); err != nil {
			return nil, err
		}
	}
	return sp, nil
}

// spawn starts one command with stdin, stdout and stderr from files, in
// the cgroups given, as the leader of a session of its own, and returns
// its pid. An error carries the exit code a shell would give.
//
// The fork happens on a fresh OS thread that joins the command's v1
// cgroups first (a thread may sit in another v1 cgroup than its process)
// and is retired afterwards. Joining a v2 cgroup takes CLONE_INTO_CGROUP,
// which needs clone3, which the command's seccomp filter refuses: so with
// a v2 cgroup the thread starts the exec stub instead (execStub), which
// takes the restrictions on itself and then executes the command.
func (sp *spawner) spawn(spec ExecSpec, files []uintptr, cg execCgroups) (int, int, error) {
	if len(spec.Argv) == 0 {
		return 0, 126, errors.New("empty command")
	}
	path, code, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		return 0, code, err
	}
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		for _, t := range cg.tasks {
			if _, err := t.Write([]byte("0")); err != nil {
				done <- result{err: fmt.Errorf("join the command's cgroup: %w", err)}
				return
			}
		}
		if cg.dir != nil {
			// the stub makes its cgroup namespace itself, once in its cgroup
			pid, err := sp.startStub(path, spec, files, cg.dir)
			done <- result{pid, err}
			return
		}
		if len(cg.tasks) > 0 {
			if err := hideCgroups(); err != nil {
				done <- result{err: err}
				return
			}
		}
		l := sp.limits
		r := restrictions{uid: l.UID, gid: l.GID, setGroups: l.SetGroups, seccomp: sp.filter, ruleset: sp.ruleset}
		if err := restrictThread(r); err != nil {
			done <- result{err: err}
			return
		}
		pid, err := syscall.ForkExec(path, spec.Argv, &syscall.ProcAttr{Dir: spec.Dir, Env: spec.Env, Files: files,
			Sys: &syscall.SysProcAttr{Setsid: true}})
		done <- result{pid, err}
	}()
	res := <-done
	if res.err != nil {
		code := 126
		if errors.Is(res.err, unix.ENOENT) {
			code = 127
		}
		return 0, code, fmt.Errorf("%s: %w", spec.Argv[0], res.err)
	}
	return res.pid, 0, nil
}

// hideCgroups gives the calling thread, and so the command it forks, a
// cgroup namespace rooted at the command's own cgroup: inside,
// /proc/self/cgroup shows "/" and no host path. Only the thread changes.
func hideCgroups() error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	return nil
}

// lookPath finds the program like a shell would, in the PATH of the
// command's own environment, and gives the shell's exit code on failure.
func lookPath(name string, env []string) (string, int, error) {
	if strings.Contains(name, "/") {
		return name, 0, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := false
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := join(dir, name)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 != 0 {
			return p, 0, nil
		}
		denied = true
	}
	if denied {
		return "", 126, fmt.Errorf("%s: permission denied", name)
	}
	return "", 127, fmt.Errorf("%s: command not found", name)
}
