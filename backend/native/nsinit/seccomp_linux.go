package nsinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp layer is an allowlist compiled to classic BPF. Every system
// call gets one action; a few get a check of their arguments. Calls the
// table does not know fail with ENOSYS, so that libc falls back to an older
// call where one exists (as it does for clone3); calls that escape or widen
// the sandbox fail with EPERM; any other architecture's ABI kills the
// process.

// action is what the filter does with one system call number.
type action uint8

const (
	actNoSys       action = iota // not in the table: ENOSYS
	actAllow                     // allowed as is
	actDeny                      // known and refused: EPERM
	actClone                     // allowed unless it asks for a new namespace
	actSocket                    // allowed for unix, inet, inet6 and netlink-route, never raw or packet
	actIoctl                     // allowed except terminal input injection
	actPersonality               // allowed for the harmless personas only
	actMemfd                     // allowed unless it asks for an executable memfd
)

// seccompData offsets (struct seccomp_data: nr, arch, ip, args[6]).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian machines
	offArg1 = 24
	offArg2 = 32
)

// Classic BPF opcodes used below.
const (
	bpfLdAbsW = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJa     = unix.BPF_JMP | unix.BPF_JA
	bpfAndK   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	bpfRetK   = unix.BPF_RET | unix.BPF_K
)

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// Values the argument checks compare against.
const (
	cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP
	sockTypeMask = 0xf
	tiocsti      = 0x5412
	tioclinux    = 0x541c
	// mfdExec is memfd_create's MFD_EXEC: a memfd whose contents may be
	// executed. Refusing it keeps written binaries from running out of
	// memory (vm.memfd_noexec=2 in the sandbox's pid namespace does the
	// same for the flags that do not name it).
	mfdExec = 0x10
)

// allowedPersonas are the personality(2) arguments a program may pass:
// PER_LINUX, the query value, and the two flags libc and setarch use.
var allowedPersonas = []uint32{0, 0x0008, 0x20000, 0x20008, 0xffffffff}

// program is classic BPF under construction, with symbolic jump targets.
type program struct {
	insns  []unix.SockFilter
	labels map[string]int
	fixups map[int]string // instruction index of a JA -> label
}

func newProgram() *program {
	return &program{labels: map[string]int{}, fixups: map[int]string{}}
}

func (p *program) emit(code uint16, jt, jf uint8, k uint32) {
	p.insns = append(p.insns, unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k})
}

func (p *program) label(name string) { p.labels[name] = len(p.insns) }

// jump emits an unconditional jump to a label, resolved in finish. JA has
// a 32-bit offset, so trees of any size stay reachable.
func (p *program) jump(name string) {
	p.fixups[len(p.insns)] = name
	p.emit(bpfJa, 0, 0, 0)
}

// ifEq jumps to label when A == k; otherwise it falls through.
func (p *program) ifEq(k uint32, name string) {
	p.emit(bpfJeqK, 0, 1, k)
	p.jump(name)
}

func (p *program) ret(v uint32) { p.emit(bpfRetK, 0, 0, v) }

func (p *program) finish() ([]unix.SockFilter, error) {
	for at, name := range p.fixups {
		to, ok := p.labels[name]
		if !ok {
			return nil, fmt.Errorf("seccomp: undefined label %q", name)
		}
		p.insns[at].K = uint32(to - at - 1)
	}
	if len(p.insns) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, over the kernel's %d", len(p.insns), unix.BPF_MAXINSNS)
	}
	return p.insns, nil
}

// span is a run of consecutive syscall numbers with the same action.
type span struct {
	lo, hi uint32 // inclusive
	act    action
}

// spans turns the table into sorted runs covering 0..limit-1.
func spans(table map[uint32]action, limit uint32) []span {
	var out []span
	for nr := uint32(0); nr < limit; nr++ {
		a := table[nr]
		if n := len(out); n > 0 && out[n-1].act == a && out[n-1].hi == nr-1 {
			out[n-1].hi = nr
			continue
		}
		out = append(out, span{nr, nr, a})
	}
	return out
}

// filterOptions vary the filter with the host.
type filterOptions struct {
	// noInetDatagrams refuses UDP (and ICMP datagram) sockets: cgroup v1
	// cannot count their buffers in the memory cap. The sandbox has no
	// network but lo, so only loopback datagrams are lost.
	noInetDatagrams bool
}

// buildFilter compiles table into a filter for one architecture. The
// number in A is found by a binary search over the spans, so each call
// costs about log2(spans) comparisons.
func buildFilter(arch uint32, table map[uint32]action, x32Bit uint32, o filterOptions) ([]unix.SockFilter, error) {
	var limit uint32
	for nr := range table {
		limit = max(limit, nr+1)
	}
	p := newProgram()
	p.emit(bpfLdAbsW, 0, 0, offArch)
	p.emit(bpfJeqK, 1, 0, arch)
	p.ret(retKill)
	p.emit(bpfLdAbsW, 0, 0, offNr)
	if x32Bit != 0 {
		// Calls through the x32 ABI carry this bit; refuse them all.
		p.emit(bpfJgeK, 0, 1, x32Bit)
		p.ret(retEPERM)
	}
	p.emit(bpfJgeK, 0, 1, limit)
	p.ret(retENOSYS)
	sp := spans(table, limit)
	p.tree(sp)
	p.argChecks(o)
	return p.finish()
}

// tree emits a binary search over sp; A holds the syscall number.
func (p *program) tree(sp []span) {
	if len(sp) == 1 {
		p.leaf(sp[0].act)
		return
	}
	mid := len(sp) / 2
	right := fmt.Sprintf("span_%d", sp[mid].lo)
	p.emit(bpfJgeK, 0, 1, sp[mid].lo)
	p.jump(right)
	p.tree(sp[:mid])
	p.label(right)
	p.tree(sp[mid:])
}

func (p *program) leaf(a action) {
	switch a {
	case actAllow:
		p.ret(retAllow)
	case actDeny:
		p.ret(retEPERM)
	case actNoSys:
		p.ret(retENOSYS)
	case actClone:
		p.jump("clone")
	case actSocket:
		p.jump("socket")
	case actIoctl:
		p.jump("ioctl")
	case actPersonality:
		p.jump("personality")
	case actMemfd:
		p.jump("memfd")
	}
}

// argChecks emits the blocks that leaves jump to. The program ends with
// the shared allow and deny returns: the kernel wants a return last.
func (p *program) argChecks(o filterOptions) {
	p.label("clone")
	p.emit(bpfLdAbsW, 0, 0, offArg0)
	p.emit(bpfAndK, 0, 0, cloneNamespaceFlags)
	p.ifEq(0, "allow")
	p.jump("deny")

	p.label("socket")
	p.emit(bpfLdAbsW, 0, 0, offArg0)
	p.ifEq(unix.AF_UNIX, "allow")
	p.ifEq(unix.AF_INET, "socket_type")
	p.ifEq(unix.AF_INET6, "socket_type")
	p.ifEq(unix.AF_NETLINK, "socket_netlink")
	p.jump("deny")
	p.label("socket_type")
	p.emit(bpfLdAbsW, 0, 0, offArg1)
	p.emit(bpfAndK, 0, 0, sockTypeMask)
	p.ifEq(unix.SOCK_RAW, "deny")
	p.ifEq(unix.SOCK_PACKET, "deny")
	if o.noInetDatagrams {
		p.ifEq(unix.SOCK_DGRAM, "deny")
	}
	p.jump("allow")
	p.label("socket_netlink")
	p.emit(bpfLdAbsW, 0, 0, offArg2)
	p.ifEq(unix.NETLINK_ROUTE, "allow")
	p.jump("deny")

	p.label("ioctl")
	p.emit(bpfLdAbsW, 0, 0, offArg1)
	p.ifEq(tiocsti, "deny")
	p.ifEq(tioclinux, "deny")
	p.jump("allow")

	p.label("personality")
	p.emit(bpfLdAbsW, 0, 0, offArg0)
	for _, v := range allowedPersonas {
		p.ifEq(v, "allow")
	}
	p.jump("deny")

	// memfd_create's flags are an unsigned int: the low 32 bits are all
	// the kernel reads.
	p.label("memfd")
	p.emit(bpfLdAbsW, 0, 0, offArg1)
	p.emit(bpfAndK, 0, 0, mfdExec)
	p.ifEq(0, "allow")
	p.jump("deny")

	p.label("allow")
	p.ret(retAllow)
	p.label("deny")
	p.ret(retEPERM)
}

// installSeccomp loads the filter on the calling thread only. The caller
// must have set no_new_privs on this thread.
func installSeccomp(filter []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: load filter: %w", errno)
	}
	return nil
}

// tableFrom builds the action table from lists of syscall numbers. A
// number in two lists is a mistake in the lists and panics; the tables are
// fixed data, so a unit test catches it before anything ships.
func tableFrom(lists map[action][]uint32) map[uint32]action {
	t := map[uint32]action{}
	for a, nrs := range lists {
		for _, nr := range nrs {
			if prev, dup := t[nr]; dup {
				panic(fmt.Sprintf("seccomp table: syscall %d listed as %d and %d", nr, prev, a))
			}
			t[nr] = a
		}
	}
	return t
}

// SeccompSupported reports whether this architecture has a syscall table;
// without one the sandbox must not run.
func SeccompSupported() bool { return syscallTable != nil }
