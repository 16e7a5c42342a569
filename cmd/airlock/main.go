// Command airlock runs code an LLM agent wrote in an isolated sandbox and
// gives back what it printed and produced. See the README for the commands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// Exit statuses of airlock itself; the rest are in package sandbox.
const (
	// exitUsage means the command line is wrong: a bad flag or value, a
	// missing command, an unknown subcommand.
	exitUsage = 2
	// exitSignal plus a signal's number is the status after that signal
	// interrupted airlock: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
	exitSignal = 128
)

// command is one subcommand: it parses args and returns the exit status.
type command struct {
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) int
}

// cliEnv is what a subcommand may touch of the outside world, so that tests
// can run subcommands in-process.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// isTerminal reports whether a writer (stdout or stderr) is a
	// terminal; nil means none is.
	isTerminal func(io.Writer) bool
	// buildInfo is debug.ReadBuildInfo; nil means there is none.
	buildInfo func() (*debug.BuildInfo, bool)
	// term is the terminal that a command's output is shown on, when
	// stderr is one and a command's output streams to it; errorf starts
	// airlock's lines afresh there.
	term *termsafe.Terminal
}

// terminal reports whether w is a terminal.
func (e *cliEnv) terminal(w io.Writer) bool {
	return e.isTerminal != nil && e.isTerminal(w)
}

// errorf prints one of airlock's own lines on stderr. When a command's
// output went to the same terminal, the line starts afresh (see
// termsafe.Terminal.Say), so that the output can neither run into it nor
// hide it.
func (e *cliEnv) errorf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	if e.term != nil {
		e.term.Say(e.stderr, line)
		return
	}
	fmt.Fprintln(e.stderr, line)
}

var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

// interrupted is the cause of the context's end when a signal came.
type interrupted struct{ sig syscall.Signal }

// Error implements error.
func (i interrupted) Error() string { return "interrupted (" + i.sig.String() + ")" }

// interruption returns the exit status for a context that a signal ended
// (exitSignal plus the signal's number), or false when none did.
func interruption(ctx context.Context) (int, bool) {
	if i, ok := context.Cause(ctx).(interrupted); ok {
		return exitSignal + int(i.sig), true
	}
	return 0, false
}

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	// SIGINT and SIGTERM end the context, with the signal as its cause;
	// the command then cleans up (a sandbox is destroyed) and exits with
	// 128 plus the signal's number. Signals stay caught until the exit,
	// so that a second Ctrl-C cannot cut the cleanup short (SIGKILL can;
	// the next start removes what a killed airlock left).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cancel(interrupted{s.(syscall.Signal)})
		}
	}()
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		isTerminal: isTerminal, buildInfo: debug.ReadBuildInfo}
	code := dispatch(ctx, env, os.Args[1:])
	os.Exit(code)
}

// dispatch runs the subcommand that args name. "airlock help CMD…" is
// "airlock CMD… --help".
func dispatch(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 {
		usage(env.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		usage(env.stdout)
		return 0
	case "help":
		if len(args) == 1 {
			usage(env.stdout)
			return 0
		}
		return dispatch(ctx, env, append(append([]string(nil), args[1:]...), "--help"))
	case "-version", "--version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		what := "command"
		if strings.HasPrefix(name, "-") {
			what = "flag"
		}
		fmt.Fprintf(env.stderr, "airlock: unknown %s %q\n", what, name)
		usage(env.stderr)
		return exitUsage
	}
	return c.run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: airlock COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'airlock help COMMAND' (or 'airlock COMMAND --help') for the flags of one command.")
}
