package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/backend/internal/hostroot"
	"github.com/airlock-sandbox/airlock/backend/internal/seccompprofile"
	"github.com/airlock-sandbox/airlock/sandbox"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// hostname is the sandbox's host name, as with every backend.
const hostname = "airlock"

// sentryThreads is what the cgroup's pids cap allows gVisor's sentry and
// gofer beyond the sandbox's own cap: their Go runtimes and the platform's
// stub threads. A sentry that cannot make a thread dies, so this is a
// safety net; the sandbox's own tasks are capped by RLIMIT_NPROC, which
// the sentry enforces.
const sentryThreads = 256

// mountFlags are the options of every writable or input bind.
var mountFlags = []string{"rbind", "nosuid", "nodev", "noexec"}

// bundle writes config.json into dir, and the root folder the spec's root
// points at (an overlay on an image, or the host image's folder); it
// returns the bundle folder.
func (i *instance) bundle(img sandbox.Image, binds []hostdir.Bind, cgroupsPath string) (string, error) {
	dir := filepath.Join(i.dir.Path(), "bundle")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	spec := baseSpec(i.policy, cgroupsPath)
	rootfs := filepath.Join(dir, "rootfs")
	if !img.IsHost() {
		if err := overlayRoot(img.RootFS, dir, rootfs); err != nil {
			return "", err
		}
	} else {
		mounts, err := buildHostRoot(rootfs)
		if err != nil {
			return "", err
		}
		spec.Mounts = append(spec.Mounts, mounts...)
	}
	spec.Root = &specs.Root{Path: rootfs, Readonly: true}
	for _, b := range binds {
		opts := append(slices.Clone(mountFlags), "rw")
		if b.ReadOnly {
			opts[len(opts)-1] = "ro"
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: b.Target, Type: "bind", Source: b.Source, Options: opts})
	}
	seccomp, err := seccompprofile.OCI(spec)
	if err != nil {
		return "", err
	}
	spec.Linux.Seccomp = seccomp
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// baseSpec is everything of the spec but the root and the binds.
func baseSpec(pol sandbox.Policy, cgroupsPath string) *specs.Spec {
	lim := pol.Limits
	rl := func(typ string, v uint64) specs.POSIXRlimit { return specs.POSIXRlimit{Type: typ, Hard: v, Soft: v} }
	env := make([]string, 0, len(command.DefaultEnv))
	for k, v := range command.DefaultEnv {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	oom := 1000
	memory := lim.MemoryBytes
	quota := int64(lim.CPUs * cpuPeriod)
	period := uint64(cpuPeriod)
	pids := int64(lim.Pids + KeeperTasks + sentryThreads)
	spec := &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Process: &specs.Process{
			User:            specs.User{UID: keeperUID, GID: keeperUID},
			Args:            command.KeeperArgs,
			Env:             env,
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: true,
			OOMScoreAdj:     &oom,
			Rlimits: []specs.POSIXRlimit{
				rl("RLIMIT_NOFILE", uint64(lim.OpenFiles)),
				rl("RLIMIT_CORE", 0),
				rl("RLIMIT_FSIZE", uint64(lim.DiskBytes)),
				// each command's shell is one of the sandbox user's tasks
				rl("RLIMIT_NPROC", uint64(lim.Pids+1)),
			},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "nodev", "noexec", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			CgroupsPath: cgroupsPath,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &memory, Swap: &memory},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: pids},
			},
		},
	}
	return spec
}

// cpuPeriod is the CFS period the CPU quota is expressed in, in µs.
const cpuPeriod = 100000

// overlayRoot mounts at rootfs the image folder under a writable layer in
// dir. runsc's gofer creates, in the root folder on the host, the mount
// points the image lacks (such as /dev/shm, whose /dev is the sentry's);
// they must land in the layer, not in the image, which other sandboxes
// share and which is never written. The sandbox still sees its root
// read-only. The mount goes with the sandbox's folder.
func overlayRoot(image, dir, rootfs string) error {
	if strings.ContainsAny(image, ",:\\") {
		return fmt.Errorf("image folder %q: the gvisor backend cannot layer a path with a comma, colon or backslash: %w", image, sandbox.ErrInvalid)
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work, rootfs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + image + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("overlay on image folder %s: %w", image, err)
	}
	return nil
}

// buildHostRoot makes the host image's root folder: the made-up /etc
// files, symlinks, and mount points for the binds, which it returns as
// mounts, along with the mount points of the sandbox's own folders.
func buildHostRoot(rootfs string) ([]specs.Mount, error) {
	plan, err := hostroot.Plan(sandboxUID, sandboxGID, hostname)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	var mounts []specs.Mount
	for _, e := range plan {
		dst := filepath.Join(rootfs, e.Dst)
		switch e.Kind {
		case hostroot.Dir:
			err = os.MkdirAll(dst, e.Mode)
		case hostroot.File:
			err = os.WriteFile(dst, []byte(e.Content), e.Mode)
		case hostroot.Symlink:
			err = os.Symlink(e.Target, dst)
		case hostroot.Bind:
			err = mountPoint(e.Src, dst)
			mounts = append(mounts, specs.Mount{Destination: "/" + e.Dst, Type: "bind", Source: e.Src,
				Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		default:
			err = fmt.Errorf("unknown entry kind %q", e.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("host root %s: %w", e.Dst, err)
		}
	}
	for _, d := range []string{"proc", "dev", "sys", "run", "tmp", "workspace/input", "workspace/output"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	return mounts, nil
}

// mountPoint makes an empty folder or file at dst for src to be bound on.
func mountPoint(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return os.MkdirAll(dst, 0o755)
	}
	return os.WriteFile(dst, nil, 0o644)
}
