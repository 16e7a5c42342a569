package nsinit

import (
	"os"
	"os/signal"
	"syscall"
)

// The supervisor starts the sandbox's init by executing this same binary
// with a marker in argv[0]. The package's init function catches the
// marker before main runs, so any program that imports this package works
// as its own sandbox init.
const Arg0 = "airlock-sandbox-init"

// Arg0Sysctl in argv[0] makes this binary write vm.memfd_noexec = 2 in
// its pid namespace and exit. The supervisor starts it, as host root, in
// a sandbox's pid namespace: only there, and only as host root, can that
// namespace's value be set.
const Arg0Sysctl = "airlock-sandbox-sysctl"

func init() {
	if len(os.Args) > 0 {
		switch os.Args[0] {
		case Arg0:
			os.Exit(initMain())
		case Arg0Exec:
			os.Exit(stubMain())
		case Arg0Sysctl:
			if err := os.WriteFile("/proc/sys/vm/memfd_noexec", []byte("2"), 0); err != nil {
				os.Stderr.WriteString(err.Error())
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
}

// ignoreSignals makes init deaf to the signals that code in the sandbox
// could send it to end it; SIGKILL from outside still ends it. The kernel
// drops a signal sent from inside a pid namespace to its pid 1 unless pid
// 1 handles it, and the Go runtime handles these to exit or dump: they are
// caught and dropped (not set to SIG_IGN, which commands would inherit
// across fork and exec). The runtime leaves the others at their default,
// or ignores them when nobody asked for them. (Landlock's signal scoping,
// where the kernel has it, refuses them all besides.)
func ignoreSignals() {
	c := make(chan os.Signal, 16)
	signal.Notify(c, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGTERM, syscall.SIGSYS, syscall.SIGPIPE)
	go func() {
		for range c {
		}
	}()
}
