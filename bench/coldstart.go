// Package bench times `airlock run` as a whole process (exec to exit, as a
// shell or an agent's tool call sees it) side by side with the baselines
// the README compares it with: bubblewrap given the same read-only /usr,
// `unshare` with fresh namespaces, and the bare command. The commands run
// alternately, the same number of times each, so that all of them see the
// same machine; each reports its median and 90th percentile.
//
//	go test -run '^$' -bench ColdStart -benchtime 200x ./bench
//	go run ./bench/cmd/coldstart -n 200        (the same, as a table)
//
// docs/COLDSTART.md says where airlock's time goes.
package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// Cmd is one command to time.
type Cmd struct {
	Name string
	Argv []string
	// Env, when set, replaces the environment of the command.
	Env []string
}

// Stats are one command's timings.
type Stats struct {
	Name          string
	N             int
	Median, P90   time.Duration
	Min, Max      time.Duration
	Samples       []time.Duration // sorted
	RatioToMedian float64         // Median over the reference command's; 0 without one
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Summarize sorts samples and computes their statistics. The median of an
// even count is the mean of the two middle samples; p90 is the nearest-rank
// 90th percentile.
func Summarize(name string, samples []time.Duration) Stats {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	st := Stats{Name: name, N: len(s), Samples: s}
	if len(s) == 0 {
		return st
	}
	st.Min, st.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		st.Median = s[n/2]
	} else {
		st.Median = (s[n/2-1] + s[n/2]) / 2
	}
	rank := (len(s)*90 + 99) / 100 // ceil(0.9 n), 1-based
	st.P90 = s[max(rank, 1)-1]
	return st
}

// Runner runs commands alternately and remembers the pids it started, so
// that Leftovers can tell what they left behind.
type Runner struct {
	Pids []int
}

// Once runs c with no stdin, stdout or stderr and times it from the start
// of the child to its reaping. A non-zero exit is an error carrying what it
// printed on stderr.
func (r *Runner) Once(c Cmd) (time.Duration, error) {
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Env = c.Env
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 4096}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	r.Pids = append(r.Pids, cmd.Process.Pid)
	err := cmd.Wait()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%s: %w: %s", strings.Join(c.Argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

// limited keeps the first n bytes written to it.
type limited struct {
	w interface{ WriteString(string) (int, error) }
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		_, _ = l.w.WriteString(string(p[:k]))
		l.n -= k
	}
	return len(p), nil
}

// Interleave runs every command once untimed (to fill caches), then n
// rounds in which each command runs once; the order rotates from round to
// round so that no command always follows the same one. It returns the
// statistics in the order of cmds; with ref set, each carries its ratio to
// the command named ref.
func (r *Runner) Interleave(cmds []Cmd, n int, ref string) ([]Stats, error) {
	samples := make([][]time.Duration, len(cmds))
	for _, c := range cmds {
		if _, err := r.Once(c); err != nil {
			return nil, err
		}
	}
	for round := range n {
		for k := range cmds {
			i := (round + k) % len(cmds)
			d, err := r.Once(cmds[i])
			if err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], d)
		}
	}
	out := make([]Stats, len(cmds))
	var refMedian time.Duration
	for i, c := range cmds {
		out[i] = Summarize(c.Name, samples[i])
		if c.Name == ref {
			refMedian = out[i].Median
		}
	}
	if refMedian > 0 {
		for i := range out {
			out[i].RatioToMedian = float64(out[i].Median) / float64(refMedian)
		}
	}
	return out, nil
}

// Names of the standard commands.
const (
	Airlock       = "airlock"
	AirlockStatic = "airlock-static"
	Bwrap         = "bwrap"
	Unshare       = "unshare"
	Bare          = "bare"
)

// True is the command every variant runs.
const True = "/bin/true"

// Standard returns the commands the README compares, in order: airlock
// (the binaries in bins: the default build, then the static one if there
// is one), bubblewrap, unshare, bare. bwrap and unshare are found in PATH;
// an error says which is missing (the commands found are returned all the
// same). With tmpDir set, airlock runs with TMPDIR there, so that
// Leftovers can check it left no temporary file.
func Standard(tmpDir string, bins ...string) ([]Cmd, error) {
	var cmds []Cmd
	for k, bin := range bins {
		a := Cmd{Name: Airlock, Argv: []string{bin, "run", "--", True}}
		if k > 0 {
			a.Name = AirlockStatic
		}
		if tmpDir != "" {
			a.Env = append(os.Environ(), "TMPDIR="+tmpDir)
		}
		cmds = append(cmds, a)
	}
	var errs []error
	if p, err := exec.LookPath("bwrap"); err != nil {
		errs = append(errs, fmt.Errorf("bubblewrap (apt-get install bubblewrap): %w", err))
	} else {
		cmds = append(cmds, Cmd{Name: Bwrap, Argv: append(append([]string{p}, BwrapArgs()...), True)})
	}
	if p, err := exec.LookPath("unshare"); err != nil {
		errs = append(errs, fmt.Errorf("unshare (util-linux): %w", err))
	} else {
		cmds = append(cmds, Cmd{Name: Unshare, Argv: []string{p, "-Urnmpiuf", "--mount-proc", True}})
	}
	cmds = append(cmds, Cmd{Name: Bare, Argv: []string{True}})
	return cmds, errors.Join(errs...)
}

// systemDirs are the host's top-level folders that the "host" image takes
// besides /usr (backend/internal/hostroot): on a merged-/usr host they are
// symlinks into /usr, elsewhere folders.
var systemDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// BwrapArgs gives bubblewrap the root the issue compares with: /usr
// read-only, the system folders as this host has them (symlinks recreated,
// real folders bound read-only), a fresh /proc, a minimal /dev, a tmpfs
// /tmp, every namespace unshared, and death with its parent. It sets up no
// cgroup, seccomp filter or Landlock, and no /etc.
func BwrapArgs() []string {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, d := range systemDirs {
		p := "/" + d
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if t, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", t, p)
			}
			continue
		}
		if st.IsDir() {
			args = append(args, "--ro-bind", p, p)
		}
	}
	return append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent")
}

// ModuleRoot is the folder of the go.mod that holds this package, as the
// go command finds it from dir.
func ModuleRoot(dir string) (string, error) {
	out, err := goCmd("env", "GOMOD").dirOutput(dir)
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(out)
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("no go.mod above %s", dir)
	}
	return filepath.Dir(mod), nil
}

// Build compiles the airlock command of the module at root into dir/name
// and returns the binary's path: go build with default flags, the way a
// user builds it, with env added to the go command's environment
// (CGO_ENABLED=0 for the static build releases use).
func Build(root, dir, name string, env ...string) (string, error) {
	bin := filepath.Join(dir, name)
	if _, err := goCmd("build", "-o", bin, "./cmd/airlock").dirOutput(root, env...); err != nil {
		return "", err
	}
	return bin, nil
}

type goInvocation []string

// goCmd finds the go command: the one in PATH (go test puts its own first),
// else the one of the toolchain that built this program.
func goCmd(args ...string) goInvocation {
	g, err := exec.LookPath("go")
	if err != nil {
		g = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	return append(goInvocation{g}, args...)
}

func (g goInvocation) dirOutput(dir string, env ...string) (string, error) {
	cmd := exec.Command(g[0], g[1:]...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s: %w: %s", strings.Join(g, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("%s: %w", strings.Join(g, " "), err)
	}
	return string(out), nil
}

// Leftovers lists what the processes the runner started left behind:
// sandbox cgroups named after one of them, live processes running one of
// the binaries exes (a sandbox's init is that binary, re-executed), and
// anything in tmpDir (the TMPDIR given to airlock).
func (r *Runner) Leftovers(tmpDir string, exes ...string) []string {
	var left []string
	for _, d := range leakcheck.Cgroups(r.Pids...) {
		left = append(left, "cgroup "+d)
	}
	if tmpDir != "" {
		ents, _ := os.ReadDir(tmpDir)
		for _, e := range ents {
			left = append(left, "temporary file "+filepath.Join(tmpDir, e.Name()))
		}
	}
	ours := map[string]bool{}
	for _, e := range exes {
		ours[e] = true
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		t, err := os.Readlink(filepath.Join("/proc", p.Name(), "exe"))
		if t = strings.TrimSuffix(t, " (deleted)"); err == nil && ours[t] {
			left = append(left, "process "+p.Name()+" running "+t)
		}
	}
	return left
}

// Table formats stats as the README's table: median, p90 and the ratio to
// the reference, in ms.
func Table(stats []Stats, ref string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| command | n | median | p90 | min | vs. %s |\n| --- | --- | --- | --- | --- | --- |\n", ref)
	for _, s := range stats {
		ratio := ""
		if s.RatioToMedian > 0 {
			ratio = fmt.Sprintf("%.2fx", s.RatioToMedian)
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f ms | %.2f ms | %.2f ms | %s |\n", s.Name, s.N, Ms(s.Median), Ms(s.P90), Ms(s.Min), ratio)
	}
	return b.String()
}

// Setup is a freshly built airlock binary, and its static build, in a
// temporary folder of their own, with an empty folder for airlock's TMPDIR
// beside them.
type Setup struct {
	Dir, Bin, Static, Tmp string
}

// Prepare builds the airlock command of the module at root into a new
// temporary folder, twice: as go build makes it by default, and with
// CGO_ENABLED=0. Close removes it.
func Prepare(root string) (*Setup, error) {
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return nil, err
	}
	s := &Setup{Dir: dir, Tmp: filepath.Join(dir, "tmp")}
	if err := os.Mkdir(s.Tmp, 0o700); err != nil {
		s.Close()
		return nil, err
	}
	if s.Bin, err = Build(root, dir, "airlock"); err == nil {
		s.Static, err = Build(root, dir, "airlock-static", "CGO_ENABLED=0")
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close removes the binaries and their folder.
func (s *Setup) Close() error { return os.RemoveAll(s.Dir) }
