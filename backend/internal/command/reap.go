package command

import (
	"strconv"
	"strings"
)

// ReapScript is run by sh as root inside a sandbox whose processes the
// host cannot see (gVisor), by a helper the code can neither signal nor
// trace, and which the sandbox user's RLIMIT_NPROC does not hold back.
// With $1 the sandbox user's uid and the pids of live processes after
// it, it kills every process of that user that is not in the tree of one
// of them (the process itself, its descendants, the members of its
// session). $2 is the pid of the process that ended, whose process group
// holds what it left (0 for none): that group is stopped and killed
// first, again and again until it is empty and reaped, with no file
// read (gVisor lets a child forked as its group is signalled escape the
// signal, so one kill of a fork bomb's group is not enough). It then
// stops the rest, pass after pass until a pass finds none
// running, since a stopped process cannot fork; then it kills them, until
// a pass finds none left, zombies included (until reaped they hold the
// user's RLIMIT_NPROC). A process group that holds only such processes
// is signalled whole, at once: a fork bomb's processes live too short to
// be caught one by one. It exits 1 if processes keep appearing. It needs
// sh and grep.
//
// Each pass reads every process's status and stat with two greps (a
// shell's read takes a byte per system call, which gVisor makes slow),
// and reads what the code controls defensively: a process's name may
// hold newlines and parentheses, so its uid is the last "Uid:" line of
// its status (the name comes first), its state, parent and session the
// fields after the last ") " of its stat's last line, and nothing read
// is ever evaluated.
const ReapScript = `uid=$1; gone=$2; shift 2; roots=" $* "; phase=STOP; n=0; known=
case $gone$roots in *[!0-9\ ]*|0*) ;; *" $gone "*) ;; *)
  i=0; while kill -STOP "-$gone" 2>/dev/null && [ $i -lt 100 ]; do i=$((i+1)); done
  i=0; while kill -KILL "-$gone" 2>/dev/null && [ $i -lt 100000 ]; do i=$((i+1)); done;;
esac
nl='
'
set -f
while :; do
  for p in $known; do unset "u_$p" "t_$p"; done
  known=
  set +f
  uids=$(grep -H '^Uid:' /proc/[0-9]*/status 2>/dev/null)
  stats=$(grep -H '' /proc/[0-9]*/stat 2>/dev/null)
  set -f
  IFS=$nl
  for l in $uids; do
    p=${l#/proc/}; p=${p%%/*}
    case $p in ''|*[!0-9]*) continue;; esac
    v=${l#*/status:Uid:}; v=${v#"${v%%[0-9]*}"}; v=${v%%[!0-9]*}
    eval "u_$p=\$v"; known="$known $p"
  done
  for l in $stats; do
    p=${l#/proc/}; p=${p%%/*}
    case $p in ''|*[!0-9]*) continue;; esac
    v=${l##*") "}
    eval "t_$p=\$v"
  done
  IFS=' 	'
  seen=0; victims=
  for p in $known; do
    [ "$p" = "$$" ] && continue
    eval "u=\${u_$p-}; t=\${t_$p-}"
    set -- $t
    g=${3-}
    case $g in ''|*[!0-9]*) g=; esac
    v=0
    if [ "$u" = "$uid" ]; then
      v=1; q=$p; depth=0
      while [ $depth -lt 64 ]; do
        case $roots in *" $q "*) v=0; break;; esac
        eval "t=\${t_$q-}"
        set -- $t
        [ $# -ge 4 ] || break
        if [ $depth = 0 ]; then case $roots in *" $4 "*) v=0; break;; esac; fi
        case $2 in ''|*[!0-9]*) break;; esac
        [ "$2" -gt 1 ] || break
        q=$2; depth=$((depth+1))
      done
    fi
    if [ $v = 1 ]; then victims="$victims $p"; [ -n "$g" ] && eval "w_$p=\$g"
    elif [ -n "$g" ]; then eval "k_$g=1"; fi
  done
  for p in $victims; do
    eval "t=\${t_$p-}; g=\${w_$p-}"; unset "w_$p"
    set -- $t
    st=${1-}
    case $phase$st in STOPT|STOPt|STOPZ|*X) continue;; esac
    seen=1
    [ "$st" = Z ] && continue
    kill -$phase "$p" 2>/dev/null
    # a group of victims only, a fork bomb's say, goes at once
    [ -n "$g" ] && eval "[ -z \"\${k_$g-}\" ]" && kill -$phase "-$g" 2>/dev/null
  done
  for p in $known; do eval "t=\${t_$p-}"; set -- $t; case ${3-} in ''|*[!0-9]*) ;; *) unset "k_$3";; esac; done
  if [ $seen = 0 ]; then
    [ $phase = KILL ] && exit 0
    phase=KILL
  fi
  n=$((n+1)); [ $n -lt 1000 ] || exit 1
done`

// KeeperArgs is a container sandbox's pid 1, run as a user of its own
// that the code cannot signal: a shell that waits, again and again, for
// a sleep it started, and so reaps each orphan that comes to it as it
// comes (the kernel's SIGCHLD-ignored autoreap does not release orphans
// that became zombies before they came to pid 1 under gVisor, and
// unreaped they would hold the sandbox user's RLIMIT_NPROC).
var KeeperArgs = []string{"/bin/sh", "-c", `trap "" HUP INT TERM; while :; do sleep 2147483647 & wait $!; done`}

// ReapArgs is the argument list that runs ReapScript for uid after the
// process gone ended (0 for none), sparing the trees of the processes
// keep.
func ReapArgs(uid, gone int, keep []int) []string {
	args := []string{"/bin/sh", "-c", ReapScript, "sh", strconv.Itoa(uid), strconv.Itoa(gone)}
	for _, p := range keep {
		args = append(args, strconv.Itoa(p))
	}
	return args
}

// SignalArgs is the argument list that sends sig (a number) to pid with
// the shell's kill; a process already gone is no error.
func SignalArgs(sig, pid int) []string {
	return []string{"/bin/sh", "-c", `kill -"$1" "$2" 2>/dev/null || [ ! -e /proc/"$2" ]`, "sh", strconv.Itoa(sig), strconv.Itoa(pid)}
}

// RuntimeFull tells whether err says that the runtime could not start a
// process because the sandbox's tasks fill a cap for now ("try again",
// EAGAIN): the processes of a fork bomb being swept come and go, and the
// threads gVisor's sentry made for them go a moment after them.
func RuntimeFull(err error) bool {
	return err != nil && strings.Contains(err.Error(), "try again")
}
