package seccompprofile

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Removed are the system calls that Docker's default profile allows and
// airlock does not: tracing and memory access of other processes, file
// handles that bypass path checks, the LDT, and the calls the native
// filter refuses that Docker's newer profiles allow (the mount tables,
// fanotify marks, the clock's tuning, secret memory, reaping another
// process's memory).
var Removed = []string{"ptrace", "process_vm_readv", "process_vm_writev", "name_to_handle_at", "modify_ldt", "kcmp",
	"statmount", "listmount", "fanotify_mark", "adjtimex", "clock_adjtime", "memfd_secret", "process_mrelease"}

// Profile is Docker's default profile made stricter: no i386 system
// calls (they kill the process), none of Removed, sockets only of the
// unix, inet and inet6 families (stream, datagram and seqpacket, never
// raw or packet) and of netlink's route protocol, and memfd_create only
// without MFD_EXEC (an executable memfd would run a binary the code
// wrote). x32 calls, which share
// x86_64's audit architecture, stay under the same allowlist as in
// Docker's profile, so that they fail rather than kill (kernels without
// x32, such as Debian's, refuse them with ENOSYS).
//
// The calls Docker refuses with ENOSYS (clone3, so that libc falls back
// to clone, whose flags a filter can read) get a trace action instead:
// with no tracer, and the sandbox cannot become one, the kernel fails the
// call with ENOSYS too, and so does gVisor, whose OCI filters ignore
// errnoRet and would answer EPERM, on which libc does not fall back.
func Profile() (*seccomp.Seccomp, error) {
	p := seccomp.DefaultProfile()
	arch, ok := nativeArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no seccomp architecture for %s: %w", runtime.GOARCH, sandbox.ErrUnsupported)
	}
	p.ArchMap = []seccomp.Architecture{arch}
	var rules []*seccomp.Syscall
	for _, s := range p.Syscalls {
		if slices.Contains(s.Names, "socket") {
			continue
		}
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return n == "memfd_create" })
		if s.Action == specs.ActErrno && s.ErrnoRet != nil && *s.ErrnoRet == uint(unix.ENOSYS) {
			s.Action, s.ErrnoRet = specs.ActTrace, nil
		}
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return slices.Contains(Removed, n) })
		if len(s.Names) > 0 {
			rules = append(rules, s)
		}
	}
	p.Syscalls = append(rules, socketRules()...)
	p.Syscalls = append(p.Syscalls, memfdRule())
	return p, nil
}

// JSON is the profile in Docker's format, for --security-opt seccomp=.
func JSON() (string, error) {
	p, err := Profile()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(p)
	return string(b), err
}

// OCI is the profile resolved for one container (its capabilities decide
// which conditional rules apply), in the OCI runtime spec's form.
func OCI(spec *specs.Spec) (*specs.LinuxSeccomp, error) {
	body, err := JSON()
	if err != nil {
		return nil, err
	}
	return seccomp.LoadProfile(body, spec)
}

// nativeArch maps Go's architecture names to seccomp's, with the
// sub-architectures allowed beside (none but x32, see Profile).
var nativeArch = map[string]seccomp.Architecture{
	"amd64":   {Arch: specs.ArchX86_64, SubArches: []specs.Arch{specs.ArchX32}},
	"arm64":   {Arch: specs.ArchAARCH64},
	"riscv64": {Arch: specs.ArchRISCV64},
	"s390x":   {Arch: specs.ArchS390X},
}

// sockTypeMask selects a socket type from socket(2)'s type argument;
// SOCK_NONBLOCK and SOCK_CLOEXEC may be set above it.
const sockTypeMask = 0xf

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
			rules = append(rules, rule(family(f), specs.LinuxSeccompArg{Index: 1, Value: sockTypeMask, ValueTwo: t, Op: specs.OpMaskedEqual}))
		}
	}
	return rules
}

// memfdRule allows memfd_create when its flags (argument 1) lack MFD_EXEC.
func memfdRule() *seccomp.Syscall {
	return &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"memfd_create"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 1, Value: unix.MFD_EXEC, ValueTwo: 0, Op: specs.OpMaskedEqual}}}}
}
