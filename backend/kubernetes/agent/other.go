//go:build !linux

package agent

import (
	"fmt"
	"os"
)

// linuxOnly answers every command on other systems: the agent runs in a
// Linux container.
func linuxOnly([]string) int {
	fmt.Fprintln(os.Stderr, "airlock-k8s-agent runs on Linux only")
	return 2
}

var (
	runInit             = linuxOnly
	runShepherd         = linuxOnly
	runExec             = linuxOnly
	runFile             = linuxOnly
	runEgress           = linuxOnly
	runEgressConn       = linuxOnly
	printSeccompProfile = linuxOnly
)
