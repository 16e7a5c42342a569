// Command coldstart prints the table of BenchmarkColdStart (package bench):
// `airlock run -- /bin/true` as a whole process, for the default build and
// the static one (CGO_ENABLED=0), beside bwrap, unshare and a bare
// /bin/true, interleaved, n runs each, medians and p90 in ms.
//
//	go run ./bench/cmd/coldstart -n 200
//
// -airlock times a binary already built instead of building one; -cmd adds
// commands to the rotation (NAME=[KEY=VALUE...] ARGV..., split on spaces;
// leading KEY=VALUE words go into the command's environment), which is how
// docs/COLDSTART.md compares experimental builds side by side:
//
//	go run ./bench/cmd/coldstart -n 200 -cmd 'patched=/tmp/airlock-x run -- /bin/true'
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/bench"
)

type cmdFlags []bench.Cmd

func (c *cmdFlags) String() string { return fmt.Sprint(len(*c)) }

// envWord is a leading KEY=VALUE word of a -cmd, set in the command's
// environment.
var envWord = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func (c *cmdFlags) Set(v string) error {
	name, line, ok := strings.Cut(v, "=")
	argv := strings.Fields(line)
	var env []string
	for len(argv) > 0 && envWord.MatchString(argv[0]) {
		env, argv = append(env, argv[0]), argv[1:]
	}
	if !ok || name == "" || len(argv) == 0 {
		return fmt.Errorf("want NAME=[KEY=VALUE...] COMMAND [ARG...], got %q", v)
	}
	cmd := bench.Cmd{Name: name, Argv: argv}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	*c = append(*c, cmd)
	return nil
}

func main() {
	n := flag.Int("n", 100, "timed runs of each command")
	bin := flag.String("airlock", "", "airlock binary to time (default: build ./cmd/airlock of this module into a temporary folder)")
	ref := flag.String("ref", bench.Bwrap, "command the ratios are to")
	var extra cmdFlags
	flag.Var(&extra, "cmd", "NAME=[KEY=VALUE...] COMMAND [ARG...] to time as well (repeatable)")
	flag.Parse()
	if err := run(*n, *bin, *ref, extra); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart:", err)
		os.Exit(1)
	}
}

func run(n int, bin, ref string, extra []bench.Cmd) error {
	tmp, bins := "", []string{bin}
	if bin == "" {
		root, err := bench.ModuleRoot(".")
		if err != nil {
			return err
		}
		s, err := bench.Prepare(root)
		if err != nil {
			return err
		}
		defer s.Close()
		bins, tmp = []string{s.Bin, s.Static}, s.Tmp
	}
	cmds, err := bench.Standard(tmp, bins...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coldstart: baseline missing:", err)
	}
	cmds = append(cmds, extra...)
	r := &bench.Runner{}
	load, _ := exec.Command("uptime").Output()
	fmt.Printf("%s, n=%d each, interleaved; load before: %s\n", time.Now().Format(time.DateTime), n, strings.TrimSpace(string(load)))
	stats, err := r.Interleave(cmds, n, ref)
	if err != nil {
		return err
	}
	load, _ = exec.Command("uptime").Output()
	fmt.Print(bench.Table(stats, ref))
	fmt.Printf("load after: %s\n", strings.TrimSpace(string(load)))
	time.Sleep(100 * time.Millisecond) // inits die with their airlock; give the kernel a moment
	if left := r.Leftovers(tmp, bins...); len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, "; "))
	}
	return nil
}
