package nsinit

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// runBPF interprets the classic BPF subset the filter uses over one
// seccomp_data record, so the filter's decisions can be checked without a
// kernel.
func runBPF(t *testing.T, prog []unix.SockFilter, data []byte) uint32 {
	t.Helper()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case bpfLdAbsW:
			a = binary.LittleEndian.Uint32(data[in.K:])
		case bpfAndK:
			a &= in.K
		case bpfJa:
			pc += int(in.K)
		case bpfJeqK, bpfJgeK:
			cond := a == in.K
			if in.Code == bpfJgeK {
				cond = a >= in.K
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfRetK:
			return in.K
		default:
			t.Fatalf("instruction %d: unexpected opcode %#x", pc, in.Code)
		}
	}
	t.Fatal("program ran off its end")
	return 0
}

func seccompData(arch uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], nr)
	binary.LittleEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

func TestFilterDecisions(t *testing.T) {
	prog, err := buildFilter(seccompArch, syscallTable, x32Bit, filterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("filter: %d instructions for %d known system calls", len(prog), len(syscallTable))
	cases := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"read", seccompArch, unix.SYS_READ, nil, retAllow},
		{"openat", seccompArch, unix.SYS_OPENAT, nil, retAllow},
		{"plain fork through clone", seccompArch, unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"thread through clone", seccompArch, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, retAllow},
		{"clone new user ns", seccompArch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, retEPERM},
		{"clone new net ns", seccompArch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWNET}, retEPERM},
		{"clone new pid ns, high bits set", seccompArch, unix.SYS_CLONE, []uint64{1<<40 | unix.CLONE_NEWPID}, retEPERM},
		{"clone3", seccompArch, unix.SYS_CLONE3, nil, retENOSYS},
		{"unshare", seccompArch, unix.SYS_UNSHARE, nil, retEPERM},
		{"mount", seccompArch, unix.SYS_MOUNT, nil, retEPERM},
		{"bpf", seccompArch, unix.SYS_BPF, nil, retEPERM},
		{"io_uring_setup", seccompArch, unix.SYS_IO_URING_SETUP, nil, retEPERM},
		{"unix socket", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"tcp socket", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, retAllow},
		{"raw inet socket", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_RAW}, retEPERM},
		{"raw inet6 socket, nonblocking", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_NONBLOCK}, retEPERM},
		{"packet socket", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_DGRAM}, retEPERM},
		{"vsock", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retEPERM},
		{"netlink route", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, retAllow},
		{"netlink audit", seccompArch, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}, retEPERM},
		{"ioctl TCGETS", seccompArch, unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, retAllow},
		{"ioctl TIOCSTI", seccompArch, unix.SYS_IOCTL, []uint64{0, tiocsti}, retEPERM},
		{"ioctl TIOCSTI, high bits set", seccompArch, unix.SYS_IOCTL, []uint64{0, 1<<32 | tiocsti}, retEPERM},
		{"personality query", seccompArch, unix.SYS_PERSONALITY, []uint64{0xffffffff}, retAllow},
		{"personality READ_IMPLIES_EXEC", seccompArch, unix.SYS_PERSONALITY, []uint64{0x0400000}, retEPERM},
		{"memfd_create cloexec", seccompArch, unix.SYS_MEMFD_CREATE, []uint64{0, unix.MFD_CLOEXEC}, retAllow},
		{"memfd_create exec", seccompArch, unix.SYS_MEMFD_CREATE, []uint64{0, unix.MFD_EXEC | unix.MFD_CLOEXEC}, retEPERM},
		{"number past the table", seccompArch, 1000, nil, retENOSYS},
		{"x32 getpid", seccompArch, x32Bit | unix.SYS_GETPID, nil, retEPERM},
		{"i386 call", unix.AUDIT_ARCH_I386, 1, nil, retKill},
	}
	for _, c := range cases {
		if got := runBPF(t, prog, seccompData(c.arch, c.nr, c.args...)); got != c.want {
			t.Errorf("%s: filter returns %#x, want %#x", c.name, got, c.want)
		}
	}
	// every number the table lists gets exactly its action
	for nr, act := range syscallTable {
		got := runBPF(t, prog, seccompData(seccompArch, nr))
		switch act {
		case actAllow:
			if got != retAllow {
				t.Errorf("syscall %d: %#x, want allow", nr, got)
			}
		case actDeny:
			if got != retEPERM {
				t.Errorf("syscall %d: %#x, want EPERM", nr, got)
			}
		case actNoSys:
			if got != retENOSYS {
				t.Errorf("syscall %d: %#x, want ENOSYS", nr, got)
			}
		}
	}
}
