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

// ignoreSignals makes init deaf to every signal that code in the sandbox
// could send it; SIGKILL from outside still ends it. The signals are
// caught and dropped rather than set to SIG_IGN, because ignored signals
// stay ignored across fork and exec, and commands must start with the
// default dispositions.
func ignoreSignals() {
	c := make(chan os.Signal, 16)
	signal.Notify(c, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTSTP,
		syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM,
		syscall.SIGPROF, syscall.SIGWINCH, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSYS)
	go func() {
		for range c {
		}
	}()
}
