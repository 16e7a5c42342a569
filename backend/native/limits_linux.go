package native

import (
	"time"

	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"golang.org/x/sys/unix"
)

// Budgets set as rlimits on every process of a sandbox (as root; rootless
// sandboxes keep the caller's, which count against the caller anyway).
const (
	sigPending    = 1024
	msgQueueBytes = 256 << 10
)

// rootlessInitTasks is added to RLIMIT_NPROC where it stands in for the
// pids cgroup: it counts init's own threads too, since all of the sandbox
// runs as one user.
const rootlessInitTasks = 16

// sandboxLimits builds what init applies once and every command inherits:
// the sandbox user, rlimits, Landlock. Where a cgroup controller is
// missing, an rlimit stands in for it (weaker, and reported in
// Result.Weakened).
func (i *instance) sandboxLimits(h *hostInfo) *nsinit.Limits {
	lim := i.policy.Limits
	fixed := func(res int, v uint64) nsinit.Rlimit { return nsinit.Rlimit{Resource: res, Cur: v, Max: v} }
	rl := []nsinit.Rlimit{
		fixed(unix.RLIMIT_CORE, 0),
		fixed(unix.RLIMIT_NOFILE, uint64(lim.OpenFiles)),
		fixed(unix.RLIMIT_FSIZE, uint64(lim.DiskBytes)),
	}
	var perCommand []nsinit.Rlimit
	has := func(ctl string) bool { return i.cg != nil && h.cgroups.ctl[ctl] != nil }
	if h.root {
		// Per-user budgets of the kernel's that are rlimits: queued
		// signals (timers too) and POSIX message queue bytes.
		rl = append(rl, fixed(unix.RLIMIT_SIGPENDING, sigPending), fixed(unix.RLIMIT_MSGQUEUE, msgQueueBytes))
	}
	if !has(ctlMemory) {
		perCommand = append(perCommand, fixed(unix.RLIMIT_AS, uint64(lim.MemoryBytes)))
	}
	if !has(ctlCPU) {
		secs := uint64(time.Duration(lim.Timeout).Seconds()*lim.CPUs) + 1
		perCommand = append(perCommand, fixed(unix.RLIMIT_CPU, secs))
	}
	if !has(ctlPids) {
		rl = append(rl, fixed(unix.RLIMIT_NPROC, uint64(lim.Pids+rootlessInitTasks)))
	}
	mem := h.cgroups.ctl[ctlMemory]
	l := &nsinit.Limits{UID: sandboxUID, GID: sandboxGID, SetGroups: h.root, Rlimits: rl,
		CommandRlimits: perCommand, OOMScoreAdj: 1000,
		NoInetDatagrams: i.cg != nil && mem != nil && !mem.v2}
	if h.landlockABI > 0 {
		l.Landlock = &nsinit.LandlockConfig{
			ABI:      h.landlockABI,
			ReadOnly: []string{"/"},
			Writable: []string{"/tmp", nsinit.OutputDir, "/dev/shm", "/dev/mqueue"},
			Devices:  prefixAll("/dev/", nsinit.DeviceNodes),
		}
	}
	return l
}

func prefixAll(p string, names []string) []string {
	out := make([]string, len(names))
	for k, n := range names {
		out[k] = p + n
	}
	return out
}
