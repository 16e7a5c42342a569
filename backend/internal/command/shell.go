package command

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// WrapOptions say what the shell of Wrap does before the command.
type WrapOptions struct {
	// Stdio, when set, names the files the shell opens as its stdin,
	// stdout and stderr before anything else (FIFOs the host reads and
	// writes); they pass to the command as its own. A shell that cannot
	// open them exits 2 without running anything.
	Stdio *[3]string
	// StopFirst stops the shell with SIGSTOP, once its stdio is open,
	// until the host continues it, so that the host can act on the
	// process (place it in a cgroup, raise its OOM score) before the
	// command runs.
	StopFirst bool
	// MarkPID prints the shell's pid, which becomes the command's, on a
	// line of its own before the command runs (see PIDLine).
	MarkPID bool
}

// Wrap runs a command through the image's /bin/sh, which removes the
// variables that container runtimes and sh add on their own (HOSTNAME,
// PWD) unless the command asked for them, and then execs the command,
// keeping its pid. sh reports a missing program (127, "not found") and
// one that cannot run (126) the way a shell user expects.
func Wrap(spec Spec, opts WrapOptions) []string {
	script := ""
	var args []string
	if opts.Stdio != nil {
		script += `exec <"$1" >"$2" 2>"$3" || exit 2; shift 3; `
		args = opts.Stdio[:]
	}
	if opts.StopFirst {
		script += `kill -STOP $$; `
	}
	if opts.MarkPID {
		script += `printf '` + pidMarker + `%d\n' "$$"; `
	}
	for _, name := range []string{"HOSTNAME", "PWD"} {
		if !slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) {
			script += "unset " + name + "; "
		}
	}
	script += `exec "$@"`
	out := append([]string{"/bin/sh", "-c", script, "sh"}, args...)
	return append(out, spec.Argv...)
}

// pidMarker starts the line on which a wrapped command prints its pid.
const pidMarker = "airlock-pid "

// maxPIDLine bounds the pid line: the marker and ten digits.
const maxPIDLine = len(pidMarker) + 10

// ErrPIDLine says that a process's output did not start with the line
// that Wrap with MarkPID prints: something else wrote to the process's
// stdout first, or the shell failed before printing it.
var ErrPIDLine = errors.New("the process's output does not start with its pid line")

// PIDLine takes the pid line that Wrap with MarkPID prints first on
// stdout, and passes everything after it on. Nothing the command prints
// can come before that line; anything else in its place (a line too
// long, not a pid, the output's end) makes PID fail, and nothing is
// passed on: the error holds what came instead. A second marker line is
// the command's own output.
type PIDLine struct {
	mu    sync.Mutex
	next  io.Writer
	head  []byte
	done  bool
	pid   int
	err   error
	ready chan struct{}
}

// NewPIDLine returns a PIDLine that passes the command's own output to
// next.
func NewPIDLine(next io.Writer) *PIDLine { return &PIDLine{next: next, ready: make(chan struct{})} }

// Write holds bytes until the first line is complete.
func (p *PIDLine) Write(b []byte) (int, error) {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return p.next.Write(b)
	}
	n := len(b)
	p.head = append(p.head, b...)
	nl := bytes.IndexByte(p.head, '\n')
	if nl < 0 && len(p.head) <= maxPIDLine {
		p.mu.Unlock()
		return n, nil
	}
	var rest []byte
	if nl >= 0 {
		p.pid, p.err = ParsePIDLine(p.head[:nl])
		if p.err == nil {
			rest = p.head[nl+1:]
		}
	} else {
		p.err = fmt.Errorf("%w: %q", ErrPIDLine, p.head[:min(len(p.head), 256)])
	}
	p.head = nil
	p.settle()
	p.mu.Unlock()
	if len(rest) > 0 {
		_, _ = p.next.Write(rest)
	}
	return n, nil
}

// settle marks the line read; the caller holds mu.
func (p *PIDLine) settle() {
	p.done = true
	close(p.ready)
}

// End says the output ended: a line still missing is an error.
func (p *PIDLine) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.err = fmt.Errorf("%w: the output ended after %q", ErrPIDLine, p.head)
	p.head = nil
	p.settle()
}

// Ready is closed once the first line was read, or the output ended.
func (p *PIDLine) Ready() <-chan struct{} { return p.ready }

// PID is the command's pid inside its sandbox, once Ready is closed.
func (p *PIDLine) PID() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done {
		return 0, fmt.Errorf("%w: not read yet", ErrPIDLine)
	}
	return p.pid, p.err
}

// ParsePIDLine reads "airlock-pid N" (without its newline): N a decimal
// pid above 1, nothing else.
func ParsePIDLine(line []byte) (int, error) {
	digits, ok := bytes.CutPrefix(line, []byte(pidMarker))
	if !ok || len(digits) == 0 || len(digits) > 10 {
		return 0, fmt.Errorf("%w: %q", ErrPIDLine, line[:min(len(line), 256)])
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", ErrPIDLine, line)
		}
	}
	pid, err := strconv.Atoi(string(digits))
	if err != nil || pid <= 1 || pid > 1<<22 {
		return 0, fmt.Errorf("%w: %q", ErrPIDLine, line)
	}
	return pid, nil
}
