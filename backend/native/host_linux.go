package native

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// hostInfo is what this host can give the native backend, probed once.
type hostInfo struct {
	root        bool
	uid, gid    int
	kernel      string
	mountAPI    bool  // open_tree, move_mount, mount_setattr (Linux 5.12+)
	userNS      error // why user namespaces are unusable, or nil
	seccomp     bool
	landlockABI int
	memfdNoexec bool // the kernel has vm.memfd_noexec (Linux 6.3+)
	cgroups     *cgroupHost
	cgroupErr   error // why cgroups cannot be created, or nil
}

func probeHost(cgroupParent string, trackUnified bool) *hostInfo {
	h := &hostInfo{uid: os.Geteuid(), gid: os.Getegid()}
	h.root = h.uid == 0
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.kernel = unix.ByteSliceToString(u.Release[:])
	}
	h.mountAPI = kernelAtLeast(h.kernel, 5, 12)
	h.userNS = userNSUsable(h.root)
	_, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	h.seccomp = err == nil
	h.landlockABI = nsinit.LandlockABI()
	_, err = os.Stat("/proc/sys/vm/memfd_noexec")
	h.memfdNoexec = err == nil
	h.cgroups = detectCgroups(cgroupParent, trackUnified)
	h.cgroupErr = cgroupsWritable(h.cgroups)
	return h
}

// kernelAtLeast compares a release string such as "6.1.0-18-amd64".
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma > major || ma == major && mi >= minor
}

// userNSUsable tells whether this process may create a user namespace.
// Root always may; others depend on sysctls that distributions set.
func userNSUsable(root bool) error {
	if v, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(v)) == "0" {
		return fmt.Errorf("user namespaces are disabled (user.max_user_namespaces = 0)")
	}
	if root {
		return nil
	}
	if v, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(v)) == "0" {
		return fmt.Errorf("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)")
	}
	if v, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(v)) == "1" {
		return fmt.Errorf("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)")
	}
	return nil
}

// cgroupsWritable checks that sandbox cgroups can be created under the
// parent folder of each hierarchy in use.
func cgroupsWritable(h *cgroupHost) error {
	hs := h.hierarchies()
	if len(hs) == 0 {
		return fmt.Errorf("no cgroup hierarchy offers memory, cpu or pids")
	}
	for _, hy := range hs {
		dir := h.parents[hy]
		for p := dir; ; p = filepath.Dir(p) {
			if _, err := os.Stat(p); err == nil {
				if unix.Access(p, unix.W_OK) != nil {
					return fmt.Errorf("cannot write %s (not root and no delegated cgroup)", p)
				}
				break
			}
			if p == hy.mount || p == "/" {
				return fmt.Errorf("cgroup %s is missing", p)
			}
		}
	}
	return nil
}

// mechanisms describes every layer's mechanism on this host; doctor
// prints them and Result.Weakened lists those not at full strength.
func (h *hostInfo) mechanisms() []sandbox.Mechanism {
	m := func(layer, name string, ok bool, strength sandbox.Strength, detail string) sandbox.Mechanism {
		if ok {
			strength = sandbox.Full
		}
		return sandbox.Mechanism{Layer: layer, Name: name, Strength: strength, Detail: detail}
	}
	var out []sandbox.Mechanism
	nsDetail := "user, mount, pid, net, ipc, uts, cgroup"
	if h.userNS != nil {
		nsDetail = h.userNS.Error()
	}
	llDetail := fmt.Sprintf("ABI %d", h.landlockABI)
	if h.landlockABI == 0 {
		llDetail = "the kernel lacks Landlock; mounts alone keep the root read-only"
	}
	scopeDetail := "signals and abstract sockets (ABI 6+)"
	if h.landlockABI < 6 {
		scopeDetail = fmt.Sprintf("Landlock ABI %d cannot scope signals and abstract sockets (needs 6)", h.landlockABI)
	}
	out = append(out,
		m("filesystem", "namespaces", h.userNS == nil, sandbox.Missing, nsDetail),
		m("filesystem", "mount API", h.mountAPI, sandbox.Missing, "kernel "+h.kernel+" (needs 5.12+)"),
		m("filesystem", "landlock", h.landlockABI > 0, sandbox.Weaker, llDetail),
		m("network", "network namespace", h.userNS == nil, sandbox.Missing, "only lo inside"),
		m("privileges", "seccomp", h.seccomp, sandbox.Missing, "allowlist filter"),
		m("privileges", "landlock scoping", h.landlockABI >= 6, sandbox.Weaker, scopeDetail),
	)
	if h.root {
		noexec := "vm.memfd_noexec = 2 in each sandbox: no memfd can be executed"
		if !h.memfdNoexec {
			noexec = "kernel " + h.kernel + " has no vm.memfd_noexec (Linux 6.3+): a binary written into a memfd can run"
		}
		out = append(out, m("filesystem", "memfd noexec", h.memfdNoexec, sandbox.Weaker, noexec))
	}
	cg := h.cgroupErr == nil
	for _, c := range []struct{ ctl, fallback string }{
		{ctlMemory, "RLIMIT_AS per process instead of a cap on the sandbox: all its processes together may hold up to the pids cap times the memory cap; no OOM report"},
		{ctlCPU, "no quota; RLIMIT_CPU caps each process's CPU seconds at the timeout times the CPUs"},
		{ctlPids, "RLIMIT_NPROC, counted per user, instead of a cap on the sandbox"},
	} {
		d, ok := h.cgroups.describe(c.ctl)
		if ok && !cg {
			ok, d = false, d+": "+h.cgroupErr.Error()
		}
		if !ok {
			d += "; " + c.fallback
		}
		out = append(out, m("resources", "cgroup "+c.ctl, ok, sandbox.Weaker, d))
	}
	mem := h.cgroups.ctl[ctlMemory]
	switch {
	case !cg || mem == nil:
		out = append(out, m("resources", "socket buffers", false, sandbox.Weaker, "not counted: no memory cgroup"))
	case mem.v2:
		out = append(out, m("resources", "socket buffers", true, sandbox.Full, "counted in the memory cap"))
	default:
		out = append(out, m("resources", "socket buffers", true, sandbox.Full,
			"cgroup v1: TCP buffers have a cap of their own, a quarter of the memory cap (kmem.tcp); UDP sockets are refused, since v1 cannot count them"))
	}
	if cg {
		out = append(out, m("lifecycle", "sweep", true, sandbox.Full, h.cgroups.sweepMechanism()))
		if h.cgroups.placement != "" {
			out = append(out, m("resources", "cgroup placement", true, sandbox.Full, h.cgroups.placement))
		}
	} else {
		out = append(out, m("lifecycle", "sweep", false, sandbox.Weaker,
			"no cgroup: what a process left is found by its session; a daemon that starts a session of its own is killed once it is orphaned"))
	}
	if h.root {
		out = append(out, m("privileges", "user mapping", true, sandbox.Full,
			"uid 0 and 1000 inside map to a host id range of the sandbox's own, which owns its user namespace: nothing is charged to a host account"))
	} else {
		out = append(out, m("privileges", "user mapping", false, sandbox.Weaker,
			fmt.Sprintf("rootless: uid 1000 inside maps to your uid %d, and per-user kernel counts made inside are charged to your account", h.uid)))
	}
	return out
}

// probeError says why the native backend cannot run here at all.
func (h *hostInfo) probeError() error {
	switch {
	case h.userNS != nil:
		return fmt.Errorf("native backend: %v: %w", h.userNS, sandbox.ErrUnsupported)
	case !h.mountAPI:
		return fmt.Errorf("native backend: kernel %s lacks the mount API (needs Linux 5.12+): %w", h.kernel, sandbox.ErrUnsupported)
	case !h.seccomp:
		return fmt.Errorf("native backend: kernel without seccomp: %w", sandbox.ErrUnsupported)
	case !nsinit.SeccompSupported():
		return fmt.Errorf("native backend: no seccomp allowlist for %s yet (amd64 only): %w", runtime.GOARCH, sandbox.ErrUnsupported)
	}
	if _, err := exec.LookPath("/proc/self/exe"); err != nil {
		return fmt.Errorf("native backend: /proc is not mounted: %w", sandbox.ErrUnsupported)
	}
	return nil
}
