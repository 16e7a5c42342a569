package docker

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// hostname is the sandbox's host name, as with every backend.
const hostname = "airlock"

// keeperCmd is the container's pid 1, run as keeperUser: a sleep that
// ignores SIGCHLD (GNU env sets the disposition, which survives exec), so
// that the kernel reaps at once the orphans that come to it. It is alone
// in the container when no command runs, and commands cannot signal it.
var keeperCmd = []string{"env", "--ignore-signal=CHLD", "sleep", "2147483647"}

// maskedPaths are hidden behind an empty file or folder: Docker's default
// list and the files the native backend also masks.
var maskedPaths = []string{
	"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
	"/sys/devices/virtual/powercap", "/proc/kallsyms", "/proc/kpagecount", "/proc/kpageflags",
	"/proc/kpagecgroup", "/proc/config.gz", "/proc/vmallocinfo", "/proc/driver",
}

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
		Cmd:             keeperCmd,
		WorkingDir:      "/",
		NetworkDisabled: true,
		Labels:          map[string]string{labelSandbox: id, labelOwner: hostdir.Owner()},
	}
}

// hostConfig is the hardened part: the docker run flags of the design,
// written out.
func hostConfig(runtimeName string, pol sandbox.Policy, binds []hostdir.Bind, profile string) *container.HostConfig {
	lim := pol.Limits
	pids := int64(lim.Pids + KeeperTasks)
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
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: int64(lim.OpenFiles), Hard: int64(lim.OpenFiles)},
				{Name: "core", Soft: 0, Hard: 0},
				{Name: "fsize", Soft: lim.DiskBytes, Hard: lim.DiskBytes},
			},
		},
	}
}

// withoutSyscalls are allowed by Docker's default profile but not by
// airlock: tracing and memory access of other processes, file handles
// that bypass path checks, and the LDT.
var withoutSyscalls = []string{"ptrace", "process_vm_readv", "process_vm_writev", "name_to_handle_at", "modify_ldt", "kcmp"}

// seccompProfile is Docker's default profile made stricter: no i386
// system calls (they kill the process), without the calls above, and
// sockets only of the unix, inet and inet6 families and netlink's route
// protocol. x32 calls, which share x86_64's audit architecture, stay
// under the same allowlist as in Docker's profile, so that they fail
// rather than kill (kernels without x32, such as Debian's, refuse them
// with ENOSYS).
func seccompProfile() (string, error) {
	p := seccomp.DefaultProfile()
	arch, ok := nativeArch[runtime.GOARCH]
	if !ok {
		return "", fmt.Errorf("docker backend: no seccomp architecture for %s: %w", runtime.GOARCH, sandbox.ErrUnsupported)
	}
	p.ArchMap = []seccomp.Architecture{arch}
	var rules []*seccomp.Syscall
	for _, s := range p.Syscalls {
		if slices.Contains(s.Names, "socket") {
			continue
		}
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return slices.Contains(withoutSyscalls, n) })
		if len(s.Names) > 0 {
			rules = append(rules, s)
		}
	}
	p.Syscalls = append(rules, socketRules()...)
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// nativeArch maps Go's architecture names to seccomp's, with the
// sub-architectures allowed beside (none but x32, see seccompProfile).
var nativeArch = map[string]seccomp.Architecture{
	"amd64":   {Arch: specs.ArchX86_64, SubArches: []specs.Arch{specs.ArchX32}},
	"arm64":   {Arch: specs.ArchAARCH64},
	"riscv64": {Arch: specs.ArchRISCV64},
	"s390x":   {Arch: specs.ArchS390X},
}

// socketRules allow unix sockets, inet and inet6 sockets of the stream,
// datagram and seqpacket types (never raw or packet ones), and netlink
// sockets of the route protocol only.
func socketRules() []*seccomp.Syscall {
	rule := func(args ...specs.LinuxSeccompArg) *seccomp.Syscall {
		return &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActAllow, Args: args}}
	}
	family := func(f uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: 0, Value: f, Op: specs.OpEqualTo}
	}
	rules := []*seccomp.Syscall{
		rule(family(unix.AF_UNIX)),
		rule(family(unix.AF_NETLINK), specs.LinuxSeccompArg{Index: 2, Value: unix.NETLINK_ROUTE, Op: specs.OpEqualTo}),
	}
	for _, f := range []uint64{unix.AF_INET, unix.AF_INET6} {
		for _, t := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET} {
			// the type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC may be set above them
			rules = append(rules, rule(family(f), specs.LinuxSeccompArg{Index: 1, Value: sockTypeMask, ValueTwo: t, Op: specs.OpMaskedEqual}))
		}
	}
	return rules
}

// sockTypeMask selects a socket type from socket(2)'s type argument.
const sockTypeMask = 0xf
