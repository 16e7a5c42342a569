package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
)

func init() {
	register("version", command{summary: "print airlock's version and the commit it was built from", run: runVersion})
}

func runVersion(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "version", "version   (or: airlock --version)")
	err := fs.parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("takes no arguments, got %q", fs.Arg(0))
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		env.errorf("airlock version: %s", errText(err))
		return exitUsage
	}
	var bi *debug.BuildInfo
	ok := false
	if env.buildInfo != nil {
		bi, ok = env.buildInfo()
	}
	fmt.Fprintln(env.stdout, versionLine(bi, ok))
	return 0
}

// versionLine says what the build information holds: the module version,
// "(devel)" for a build from a source tree; the VCS commit, with
// "modified" when the tree had changes, and its time, "unknown" when the
// build did not record them (go run, go test, -buildvcs=false); and the
// Go version.
func versionLine(bi *debug.BuildInfo, ok bool) string {
	version, commit, when, goVersion := "(devel)", "unknown", "unknown", "unknown"
	var modified bool
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" {
			version = v
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "airlock %s, commit %s", version, commit)
	if modified {
		b.WriteString(" (modified)")
	}
	fmt.Fprintf(&b, ", committed %s, built with %s", when, goVersion)
	return b.String()
}

// versionString is the module version alone, for handshakes ("(devel)"
// from a source tree).
func versionString(env *cliEnv) string {
	if env.buildInfo != nil {
		if bi, ok := env.buildInfo(); ok && bi != nil && bi.Main.Version != "" {
			return bi.Main.Version
		}
	}
	return "(devel)"
}
