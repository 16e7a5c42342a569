package command

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WrapOptions say what the shell of Wrap does before the command.
type WrapOptions struct {
	// MarkPID prints the shell's pid on a line of its own (see PIDLine).
	MarkPID bool
	// StopFirst stops the shell with SIGSTOP until the host continues it,
	// so that the host can act on the process (see RaiseOOMScore) before
	// the command runs.
	StopFirst bool
	// Control makes the shell stay as the command's parent and talk with
	// the host over descriptors 3 (from the host) and 4 (to the host),
	// which the command does not get: when the command ends the shell says
	// "ended", and if the host answers "sweep" (no other command runs) it
	// kills every process of its user, as SweepScript does, and says
	// "swept" or "failed"; then it exits with the command's status. This
	// spares the host a second command for the sweep.
	Control bool
}

// Lines of the Control protocol.
const (
	CtlEnded  = "ended"
	CtlSweep  = "sweep"
	CtlSkip   = "skip"
	CtlSwept  = "swept"
	CtlFailed = "failed"
)

// controlTail is what the shell of a Control wrap does once the command
// has ended.
const controlTail = `s=$?; echo ` + CtlEnded + ` >&4; read -r v <&3
if [ "$v" = ` + CtlSweep + ` ]; then
  n=0; r=` + CtlSwept + `
  while kill -9 -1 2>/dev/null; do n=$((n+1)); [ $n -lt 10000 ] || { r=` + CtlFailed + `; break; }; done
  echo $r >&4
fi
exit $s`

// Wrap runs a command through the image's /bin/sh, which removes the
// variables that container runtimes and sh add on their own (HOSTNAME,
// PWD) unless the command asked for them, and then execs the command,
// keeping its pid (with Control, runs it as its child). sh reports a missing program (127, "not found") and
// one that cannot run (126) the way a shell user expects.
func Wrap(spec Spec, opts WrapOptions) []string {
	script := ""
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
	if opts.Control {
		script += `"$@" 3<&- 4>&-; ` + controlTail
	} else {
		script += `exec "$@"`
	}
	return append([]string{"/bin/sh", "-c", script, "sh"}, spec.Argv...)
}

// SweepScript, run by sh as the sandbox user, kills every process that
// user may signal (all of the sandbox's but the script's own and those
// of other users, such as the container's pid 1) until kill(-1) finds
// none left. It exits 1 if processes keep appearing.
const SweepScript = `n=0; while kill -9 -1 2>/dev/null; do n=$((n+1)); [ $n -lt 10000 ] || exit 1; done`

// KillSessionScript, run by sh with the session id as $1, kills every
// process of that session (a command started by a runtime leads its own
// session) until none is left.
const KillSessionScript = `sid=$1; n=0
while :; do
  found=0
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    set -- ${line##*) }
    [ "$4" = "$sid" ] || continue
    p=${f#/proc/}; p=${p%/stat}
    [ "$p" = "$$" ] || { kill -9 "$p" 2>/dev/null && found=1; }
  done
  [ $found = 1 ] || exit 0
  n=$((n+1)); [ $n -lt 1000 ] || exit 1
done`

// pidMarker starts the line on which a wrapped command prints its pid.
const pidMarker = "airlock-pid "

// PIDLine takes the pid line that Wrap with markPID prints first on
// stdout, and passes everything after it on. Nothing the command prints
// can come before that line.
type PIDLine struct {
	mu   sync.Mutex
	next io.Writer
	head []byte
	done bool
	pid  int
}

// NewPIDLine returns a PIDLine that passes the command's own output to
// next.
func NewPIDLine(next io.Writer) *PIDLine { return &PIDLine{next: next} }

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
	if nl < 0 && len(p.head) < 64 {
		p.mu.Unlock()
		return n, nil
	}
	p.done = true
	rest := p.head
	if nl >= 0 && bytes.HasPrefix(p.head, []byte(pidMarker)) {
		p.pid, _ = strconv.Atoi(string(p.head[len(pidMarker):nl]))
		rest = p.head[nl+1:]
	}
	p.head = nil
	p.mu.Unlock()
	if len(rest) > 0 {
		_, _ = p.next.Write(rest)
	}
	return n, nil
}

// PID is the command's pid inside its sandbox once the line was read,
// else 0.
func (p *PIDLine) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// RetryWhileFull runs fn, a command of the backend's own started as the
// sandbox user, again while it fails because that user's tasks fill the
// pids cap (the runtime reports EAGAIN, "try again"): the processes of a
// fork bomb come and go, and one free slot is enough for a sweep to
// begin. It gives up when ctx ends.
func RetryWhileFull(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || !strings.Contains(err.Error(), "try again") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
