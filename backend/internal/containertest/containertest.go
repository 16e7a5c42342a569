// Package containertest holds what the tests of the container backends
// (docker, gvisor) share: the runsc binary, the suite's checks that
// gVisor or an image root answer otherwise with the reasons, and checks of
// their own (see checks_linux.go).
package containertest

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
)

// Image is the image the suites run.
const Image = testimage.Name

// Runsc finds runsc in PATH, else the one .ci/lib/runsc.sh built, or skips
// t (fails it under CI).
func Runsc(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	found, _ := filepath.Glob(filepath.Join(testimage.CacheDir(), "runsc-*", "runsc"))
	var err error
	if len(found) == 0 {
		err = errors.New("no runsc in PATH or in " + testimage.CacheDir())
	}
	testenv.Require(t, "gVisor's runsc (bash .ci/lib/runsc.sh builds it)", err)
	return found[0]
}

// Merge joins skip maps; later ones win.
func Merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// ImageSkips are the checks that an image root answers otherwise than
// the host's folders.
var ImageSkips = map[string]string{
	"read /home": "the image has its own /home (empty, from Debian's base-files); the host's /home is not mounted " +
		"(read host canary and the /proc/*/root checks cover host files)",
	"list /home": "the image has its own empty /home; the host's is not mounted",
}

// GVisorSkips are the checks that gVisor answers otherwise, and why.
var GVisorSkips = map[string]string{
	"memory cap": "gVisor does not enforce the memory cap itself: the host's cgroup does, and its OOM killer ends the sentry, " +
		"which is the whole sandbox; the command's Result says oom_killed with exit 137 and the sandbox is destroyed, " +
		"so the test's second command cannot run (TestMemoryEndsSandbox checks this)",
	"pids_limit_hit reported": "the sandbox's tasks are capped by RLIMIT_NPROC, which the sentry enforces (forks beyond it " +
		"fail with EAGAIN), but the host sees no refusal to report as pids_limit_hit; a cgroup pids cap counts the " +
		"sentry's own threads and crashes it at the cap (gVisor issue 2490), so the cgroup only has a safety net",
	"lower /proc/self/oom_score_adj": "oom_score_adj inside is a number of gVisor's kernel with no effect on the host; " +
		"the sentry's own host score is 1000 (TestOOMScoreAdj checks it)",
	"open /dev/tty":   "gVisor's own /dev has a tty device of the sentry; without a controlling terminal open() fails with ENXIO",
	"/dev is minimal": "gVisor's /dev also holds tty, fuse and net/tun, all implemented inside the sentry: no host device is reachable",
	"every mount is nosuid": "gVisor's root and /dev/pts show no nosuid (its binds do); no_new_privs makes setuid bits inert, " +
		"and setuid would only change ids inside the sentry",
	"uid 0 is not host root": "the uid_map inside is gVisor's own user namespace: no sandbox uid is a host uid, the sentry serves " +
		"every system call; the sentry itself runs as host root with five capabilities under its own seccomp filter (rootful runsc)",
	"artifact fifo":   "a FIFO made inside gVisor lives in the sentry only; none appears in the host folder, so the filter sees nothing",
	"artifact socket": "a unix socket bound inside gVisor lives in the sentry only; none appears in the host folder",
	"landlock":        NoLandlock,
	"i386 system call kills the process": "gVisor has no i386 ABI: int 0x80 is answered by the sentry (-1, EPERM), " +
		"never passed to the host kernel",
	"/proc/sysrq-trigger masked": "gVisor's /proc is the sentry's own and runsc applies no OCI maskedPaths: its " +
		"sysrq-trigger is write-only and writing it reaches no host kernel",
	"memfd_create MFD_NOEXEC_SEAL works":                       "gVisor's memfd_create knows no MFD_NOEXEC_SEAL and answers EINVAL",
	"exec of a memfd (flags 0) via execveat":                   gvisorMemfdExec,
	"exec of a memfd (flags 0) via execve /proc/self/fd/N":     gvisorMemfdExec,
	"exec of a memfd (MFD_CLOEXEC) via execveat":               gvisorMemfdExec,
	"exec of a memfd (MFD_CLOEXEC) via execve /proc/self/fd/N": gvisorMemfdExec,
	"/proc/sys read-only":                                      gvisorProcRW,
	"/proc/irq read-only":                                      gvisorProcRW,
	"/proc/bus read-only":                                      gvisorProcRW,
	"/proc/fs read-only":                                       gvisorProcRW,
	"next command after a memory bomb": "the host's OOM killer ends gVisor's sentry, the whole sandbox, at the memory cap " +
		"(Features.SurvivesOOM is false); TestMemoryEndsSandbox checks the Result says 137 and oom_killed and that Done closes with ErrDied",
	"/tmp is nodev":              gvisorNodev,
	"/workspace/output is nodev": gvisorNodev,
	"/dev/shm is nodev":          gvisorNodev,
	"/workspace/input is nodev":  gvisorNodev,
}

// gvisorMemfdExec is why a binary written to a memfd runs under gVisor (the
// README says so).
const gvisorMemfdExec = "gVisor has neither vm.memfd_noexec nor Landlock: a binary written into a memfd made without " +
	"MFD_EXEC runs, inside the sentry, which serves its every system call (README, The limits of isolation)"

// gvisorProcRW is why gVisor's /proc folders are not read-only mounts.
const gvisorProcRW = "gVisor's /proc is the sentry's own emulation, not the host kernel's, and runsc applies no OCI " +
	"readonlyPaths: a write changes at most the sentry's state (write /proc/sys/* checks what it refuses)"

// NoLandlock is why the suite's Landlock checks do not apply to the container
// backends: they apply no Landlock ruleset (the README says so). Commands of
// one sandbox may then write their own /proc/self files and signal or reach
// each other; the sandboxes stay apart from each other and from the host.
const NoLandlock = "the container backends apply no Landlock ruleset (README, Backends); the checks that only " +
	"Landlock stops (writes to a process's own /proc files, whiteouts, signals and abstract sockets between " +
	"commands of one sandbox) cannot apply"

// ProfileSkips are the checks that the container profile (seccompprofile)
// answers otherwise than the native filter, on every container runtime.
var ProfileSkips = map[string]string{
	"ioctl TIOCSTI": "the container profile keeps Docker's rule that allows every ioctl request; no terminal reaches a " +
		"container (a command's stdin, stdout and stderr are pipes), so the kernel answers ENOTTY",
	"ioctl TIOCLINUX": "the container profile keeps Docker's rule that allows every ioctl request; no Linux console " +
		"reaches a container, so the kernel answers ENOTTY",
}

// gvisorNodev says why gVisor's mounts show no nodev.
const gvisorNodev = "gVisor's mounts have no nodev flag: device files are the sentry's own, and its gofer opens no host device " +
	"(the bind's host folder is a nodev tmpfs too)"
