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

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0 {
		os.Exit(initMain())
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
