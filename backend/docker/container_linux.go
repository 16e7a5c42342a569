package docker

import (
	"slices"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

// hostname is the sandbox's host name, as with every backend.
const hostname = "airlock"

// maskedPaths are hidden behind an empty file or folder: Docker's default
// list and the files the native backend also masks.
var maskedPaths = []string{
	"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
	"/sys/devices/virtual/powercap", "/proc/kallsyms", "/proc/kpagecount", "/proc/kpageflags",
	"/proc/kpagecgroup", "/proc/config.gz", "/proc/vmallocinfo", "/proc/driver",
	"/proc/key-users", "/proc/sysrq-trigger", "/proc/firmware", "/proc/tty",
}

// sentryThreads is what the cgroup's pids cap allows gVisor's sentry and
// gofer beyond the sandbox's own cap: their Go runtimes and the platform's
// stub threads.
const sentryThreads = 256

// readonlyPaths are Docker's default read-only /proc paths.
var readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// containerConfig is the container: the image, the keeper process, the
// labels that name its sandbox and owner.
func containerConfig(ref, id string) *container.Config {
	env := make([]string, 0, len(command.DefaultEnv))
	for k, v := range command.DefaultEnv {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return &container.Config{
		Image:           ref,
		Hostname:        hostname,
		User:            keeperUser,
		Env:             env,
		Cmd:             command.KeeperArgs,
		WorkingDir:      "/",
		NetworkDisabled: true,
		Labels:          map[string]string{labelSandbox: id, labelOwner: hostdir.Owner()},
	}
}

// execReserve is what the container's pids cap allows beyond the
// policy's cap with runc, where each process has the policy's cap in its
// own cgroup (see procCgroup): room for the runtime to start the next
// process while one fills its cap.
const execReserve = 8

// hostConfig is the hardened part: the docker run flags of the design,
// written out.
func hostConfig(runtimeName string, pol sandbox.Policy, binds []hostdir.Bind, profile string) *container.HostConfig {
	lim := pol.Limits
	pids := int64(lim.Pids + KeeperTasks + execReserve)
	ulimits := []*container.Ulimit{
		{Name: "nofile", Soft: int64(lim.OpenFiles), Hard: int64(lim.OpenFiles)},
		{Name: "core", Soft: 0, Hard: 0},
		{Name: "fsize", Soft: lim.DiskBytes, Hard: lim.DiskBytes},
	}
	if runtimeName == RuntimeRunsc {
		// The sentry enforces RLIMIT_NPROC for the sandbox user's tasks;
		// the cgroup counts the sentry's own host threads, and a sentry
		// that cannot make one dies, so it only gets a safety net.
		ulimits = append(ulimits, &container.Ulimit{Name: "nproc", Soft: int64(lim.Pids), Hard: int64(lim.Pids)})
		pids = int64(lim.Pids + KeeperTasks + sentryThreads)
	}
	mounts := make([]mount.Mount, 0, len(binds))
	for _, b := range binds {
		mounts = append(mounts, mount.Mount{
			Type: mount.TypeBind, Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true},
		})
	}
	return &container.HostConfig{
		Runtime:        runtimeName,
		NetworkMode:    "none",
		IpcMode:        "private",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + profile},
		OomScoreAdj:    1000,
		LogConfig:      container.LogConfig{Type: "none"},
		Mounts:         mounts,
		MaskedPaths:    maskedPaths,
		ReadonlyPaths:  readonlyPaths,
		Resources: container.Resources{
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes,
			NanoCPUs:   int64(lim.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits:    ulimits,
		},
	}
}
