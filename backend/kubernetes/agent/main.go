package agent

import (
	"fmt"
	"os"
)

// Main runs the agent with its arguments (os.Args) and returns the exit
// status.
func Main(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: airlock-k8s-agent init|run|exec|file|egress|egress-conn|seccomp-profile|version ...")
		return 2
	}
	rest := args[2:]
	switch args[1] {
	case CmdVersion:
		fmt.Println(Version)
		return 0
	case CmdInit:
		return runInit(rest)
	case CmdRun:
		return runShepherd(rest)
	case CmdExec:
		return runExec(rest)
	case CmdFile:
		return runFile(rest)
	case CmdEgress:
		return runEgress(rest)
	case CmdEgressConn:
		return runEgressConn(rest)
	case CmdSeccompProfile:
		return printSeccompProfile(rest)
	}
	fmt.Fprintf(os.Stderr, "airlock-k8s-agent: unknown command %q\n", args[1])
	return 2
}
