package native

import (
	"fmt"
	"os"
	"os/exec"
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
	cgroups     *cgroupHost
	cgroupErr   error // why cgroups cannot be created, or nil
}

func probeHost(cgroupParent string) *hostInfo {
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
	h.cgroups = detectCgroups(cgroupParent)
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
		dir := hy.mount + "/" + h.parent
		if _, err := os.Stat(dir); err == nil {
			if unix.Access(dir, unix.W_OK) != nil {
				return fmt.Errorf("cannot write %s", dir)
			}
			continue
		}
		if unix.Access(hy.mount, unix.W_OK) != nil {
			return fmt.Errorf("cannot create %s (not root and no delegated cgroup)", dir)
		}
	}
	return nil
}

// weakened lists the layers that would run weaker than their full form
// here. An empty list means every layer is at full strength.
func (h *hostInfo) weakened() []string {
	var w []string
	for _, c := range []struct{ ctl, fallback string }{
		{ctlMemory, "memory: RLIMIT_AS per process, set just after the command starts (and on what it forked meanwhile), instead of a cgroup cap; no OOM report"},
		{ctlCPU, "cpu: no quota; RLIMIT_CPU, set just after the command starts, caps its CPU seconds instead"},
		{ctlPids, "pids: RLIMIT_NPROC instead of a cgroup cap"},
	} {
		if h.cgroupErr != nil || h.cgroups.ctl[c.ctl] == nil {
			w = append(w, c.fallback)
		}
	}
	switch {
	case h.landlockABI == 0:
		w = append(w, "filesystem: no Landlock (kernel lacks it); mounts alone keep the root read-only")
	case h.landlockABI < 6:
		w = append(w, fmt.Sprintf("privileges: Landlock ABI %d cannot scope signals and abstract sockets (needs 6)", h.landlockABI))
	}
	return w
}

// mechanisms describes every layer's mechanism for doctor.
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
	out = append(out,
		m("filesystem", "namespaces", h.userNS == nil, sandbox.Missing, nsDetail),
		m("filesystem", "mount API", h.mountAPI, sandbox.Missing, "kernel "+h.kernel+" (needs 5.12+)"),
		m("filesystem", "landlock", h.landlockABI > 0, sandbox.Weaker, fmt.Sprintf("ABI %d", h.landlockABI)),
		m("network", "network namespace", h.userNS == nil, sandbox.Missing, "only lo inside"),
		m("privileges", "seccomp", h.seccomp, sandbox.Missing, "allowlist filter"),
		m("privileges", "landlock scoping", h.landlockABI >= 6, sandbox.Weaker, "signals and abstract sockets (ABI 6+)"),
	)
	for _, c := range []string{ctlMemory, ctlCPU, ctlPids} {
		d, ok := h.cgroups.describe(c)
		if ok && h.cgroupErr != nil {
			ok, d = false, d+": "+h.cgroupErr.Error()
		}
		out = append(out, m("resources", "cgroup "+c, ok, sandbox.Weaker, d+rlimitNote(ok)))
	}
	rootless := "running as root: uid 1000 inside maps to an unprivileged host id"
	if !h.root {
		rootless = fmt.Sprintf("rootless: uid 1000 inside maps to your uid %d", h.uid)
	}
	out = append(out, m("privileges", "user mapping", true, sandbox.Full, rootless))
	return out
}

func rlimitNote(ok bool) string {
	if ok {
		return ""
	}
	return "; falls back to rlimits"
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
