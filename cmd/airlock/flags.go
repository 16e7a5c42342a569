package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

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
		return fmt.Errorf("size must be above zero")
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
		return fmt.Errorf("duration must be above zero")
	}
	*d.v = x
	return nil
}

// flagSet is a subcommand's flags. Parse errors are returned, not
// printed; -h prints the usage to stderr.
type flagSet struct {
	*flag.FlagSet
	env   *cliEnv
	usage string
}

func newFlagSet(env *cliEnv, name, usage string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, env: env, usage: usage}
}

// parse parses args; a bad flag is an ErrInvalid that points at -h.
func (f *flagSet) parse(args []string) error {
	err := f.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(f.env.stderr, "usage: airlock %s\n\nflags:\n", f.usage)
		f.SetOutput(f.env.stderr)
		f.PrintDefaults()
		return err
	}
	return fmt.Errorf("%v (see 'airlock %s -h'): %w", err, f.Name(), sandbox.ErrInvalid)
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
	if err != nil || x <= 0 {
		return fmt.Errorf("want a number above zero")
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
	if err != nil || x <= 0 {
		return fmt.Errorf("want a whole number above zero")
	}
	*f.v = x
	return nil
}
