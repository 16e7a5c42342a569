package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// sizeFlag reads sizes like "512MiB" into a byte count.
type sizeFlag struct{ v *int64 }

func (s sizeFlag) String() string {
	if s.v == nil || *s.v == 0 {
		return ""
	}
	return sandbox.FormatSize(*s.v)
}

func (s sizeFlag) Set(v string) error {
	n, err := sandbox.ParseSize(v)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("size %q must be above zero: %w", v, sandbox.ErrInvalid)
	}
	*s.v = n
	return nil
}

// durationFlag reads "30s", "2m" or a number of seconds.
type durationFlag struct{ v *sandbox.Duration }

func (d durationFlag) String() string {
	if d.v == nil || *d.v == 0 {
		return ""
	}
	return d.v.String()
}

func (d durationFlag) Set(v string) error {
	x, err := sandbox.ParseDuration(v)
	if err != nil {
		return err
	}
	if x <= 0 {
		return fmt.Errorf("duration %q must be above zero: %w", v, sandbox.ErrInvalid)
	}
	*d.v = x
	return nil
}

// zeroOrDuration reads "720h", "30m" or a number of seconds, where 0
// turns the thing it bounds off.
type zeroOrDuration struct{ v *time.Duration }

func (d zeroOrDuration) String() string {
	if d.v == nil {
		return ""
	}
	return d.v.String()
}

func (d zeroOrDuration) Set(v string) error {
	x, err := sandbox.ParseDuration(v)
	if err != nil {
		return err
	}
	if x < 0 {
		return fmt.Errorf("duration %q is negative: %w", v, sandbox.ErrInvalid)
	}
	*d.v = time.Duration(x)
	return nil
}

// positiveFloat is a float flag that must be above zero when given.
type positiveFloat struct{ v *float64 }

func (f positiveFloat) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}

func (f positiveFloat) Set(s string) error {
	x, err := strconv.ParseFloat(s, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && math.IsInf(x, 1):
		return fmt.Errorf("%q is too large: %w", s, sandbox.ErrInvalid)
	case err != nil && !errors.Is(err, strconv.ErrRange), math.IsNaN(x):
		return fmt.Errorf("%q is not a number: %w", s, sandbox.ErrInvalid)
	case x <= 0:
		return fmt.Errorf("%q must be above zero: %w", s, sandbox.ErrInvalid)
	}
	*f.v = x
	return nil
}

// positiveInt is an int flag that must be above zero when given.
type positiveInt struct{ v *int }

func (f positiveInt) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.Itoa(*f.v)
}

func (f positiveInt) Set(s string) error {
	x, err := strconv.Atoi(s)
	if err != nil {
		// A number too large for an int, in any notation, is too large;
		// anything else is not a whole number.
		y, ferr := strconv.ParseFloat(s, 64)
		number := ferr == nil || errors.Is(ferr, strconv.ErrRange)
		switch {
		case number && y >= math.MaxInt:
			return fmt.Errorf("%q is too large: %w", s, sandbox.ErrInvalid)
		case number && y <= 0:
			return fmt.Errorf("%q must be above zero: %w", s, sandbox.ErrInvalid)
		}
		return fmt.Errorf("%q is not a whole number: %w", s, sandbox.ErrInvalid)
	}
	if x <= 0 {
		return fmt.Errorf("%q must be above zero: %w", s, sandbox.ErrInvalid)
	}
	*f.v = x
	return nil
}

// flagSet is a subcommand's flags. Parse errors are returned, not
// printed; --help prints the usage to stdout.
type flagSet struct {
	*flag.FlagSet
	env   *cliEnv
	usage string
	// valueErr is the first error that a Var flag's Set returned.
	valueErr error
}

// backendNamed tells, after parse, whether --backend or AIRLOCK_BACKEND
// named a backend; a server (AIRLOCK_URL) otherwise picks its default.
func (fs *flagSet) backendNamed() bool {
	named := fs.env.getenv("AIRLOCK_BACKEND") != ""
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "backend" })
	return named
}

func newFlagSet(env *cliEnv, name, usage string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, env: env, usage: usage}
}

// Var defines a flag whose Set errors name the flag once, as
// "--NAME: what is wrong"; the flag package's own wording names the value
// and the flag around the error, which names the value again.
func (f *flagSet) Var(v flag.Value, name, usage string) {
	f.FlagSet.Var(namedValue{Value: v, name: name, fs: f}, name, usage)
}

// namedValue records the Set errors of one flag in its flagSet.
type namedValue struct {
	flag.Value
	name string
	fs   *flagSet
}

// Set implements flag.Value.
func (n namedValue) Set(s string) error {
	err := n.Value.Set(s)
	if err != nil && n.fs.valueErr == nil {
		if !errors.Is(err, sandbox.ErrInvalid) {
			err = fmt.Errorf("%w: %w", err, sandbox.ErrInvalid)
		}
		n.fs.valueErr = fmt.Errorf("--%s: %w", n.name, err)
	}
	return err
}

// parse parses args. A bad flag or value is an error wrapping
// sandbox.ErrInvalid; --help prints the usage and returns flag.ErrHelp.
func (f *flagSet) parse(args []string) error {
	err := f.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		f.printUsage(f.env.stdout)
		return err
	case f.valueErr != nil:
		return f.valueErr
	}
	return fmt.Errorf("%v (see 'airlock %s --help'): %w", err, f.Name(), sandbox.ErrInvalid)
}

// printUsage writes the usage line and the flags, each as --name.
func (f *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: airlock %s\n", f.usage)
	any := false
	f.VisitAll(func(fl *flag.Flag) {
		if !any {
			fmt.Fprint(w, "\nflags:\n")
			any = true
		}
		arg, text := flag.UnquoteUsage(fl)
		if arg != "" {
			arg = " " + arg
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s", fl.Name, arg, strings.ReplaceAll(text, "\n", "\n    \t"))
		if fl.DefValue != "" && fl.DefValue != "false" {
			fmt.Fprintf(w, " (default %q)", fl.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// errText is the message of err as airlock prints it. An error that wraps
// sandbox.ErrInvalid already says what is invalid, so the sentinel's own
// text ("invalid argument") is left off its end.
func errText(err error) string {
	s := err.Error()
	if errors.Is(err, sandbox.ErrInvalid) {
		s = strings.TrimSuffix(s, ": "+sandbox.ErrInvalid.Error())
	}
	return s
}
