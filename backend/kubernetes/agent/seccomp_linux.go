package agent

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/backend/internal/seccompprofile"
)

// printSeccompProfile prints airlock's container profile (package
// seccompprofile) in the JSON form that a kubelet reads from its seccomp
// folder as a Localhost profile.
func printSeccompProfile(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: airlock-k8s-agent seccomp-profile")
		return 2
	}
	js, err := seccompprofile.JSON()
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: seccomp profile: %v\n", err)
		return 1
	}
	fmt.Println(js)
	return 0
}
