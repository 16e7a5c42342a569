package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func init() {
	register("doctor", command{summary: "show what this host can enforce, per backend and layer", run: runDoctor})
}

// doctorReport is doctor's JSON form.
type doctorReport struct {
	Default  string          `json:"default_backend"`
	Backends []doctorBackend `json:"backends"`
}

type doctorBackend struct {
	sandbox.Capabilities
	Usable bool   `json:"usable"`
	Error  string `json:"error,omitempty"`
}

func runDoctor(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "doctor", "doctor [--json]\n\nExit status 0 when the default backend can run here, 1 when not.")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	err := fs.parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("takes no arguments, got %q", fs.Arg(0))
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		env.errorf("airlock doctor: %s", errText(err))
		return exitUsage
	}
	def := env.getenv("AIRLOCK_BACKEND")
	if def == "" {
		def = "native"
	}
	rep := doctorReport{Default: def}
	defaultOK := false
	for _, name := range backendNames {
		be, err := newBackend(env, name, backendOptions{})
		if err != nil {
			rep.Backends = append(rep.Backends, doctorBackend{Capabilities: sandbox.Capabilities{Backend: name}, Error: err.Error()})
			continue
		}
		d := doctorBackend{Capabilities: be.Capabilities(ctx)}
		if err := be.Probe(ctx); err != nil {
			d.Error = err.Error()
		} else {
			d.Usable = true
		}
		be.Close()
		if name == def {
			defaultOK = d.Usable
		}
		rep.Backends = append(rep.Backends, d)
	}
	if *asJSON {
		_ = writeJSON(env.stdout, rep)
	} else {
		printDoctor(env, rep)
	}
	if !defaultOK {
		env.errorf("airlock doctor: the default backend %q cannot run here", def)
		return 1
	}
	return 0
}

func printDoctor(env *cliEnv, rep doctorReport) {
	for _, b := range rep.Backends {
		state := "usable"
		if !b.Usable {
			state = "NOT usable: " + b.Error
		}
		fmt.Fprintf(env.stdout, "backend %s: %s\n", b.Backend, state)
		tw := tabwriter.NewWriter(env.stdout, 2, 4, 2, ' ', 0)
		for _, m := range b.Mechanisms {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", m.Layer, m.Name, m.Strength, m.Detail)
		}
		tw.Flush()
		fmt.Fprintln(env.stdout)
	}
	fmt.Fprintf(env.stdout, "default backend: %s\n", rep.Default)
}
