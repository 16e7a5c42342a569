package agent

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/backend/internal/seccompprofile"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// printSeccompProfile prints airlock's container profile (package
// seccompprofile) resolved for a container without capabilities, as a
// sandbox Pod's containers are, in the JSON form that a kubelet reads
// from its seccomp folder as a Localhost profile. Resolved, with no rule
// left that depends on capabilities: the unresolved profile, as the test
// cluster's containerd resolved it, let the sandbox unshare a user
// namespace.
func printSeccompProfile(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: airlock-k8s-agent seccomp-profile")
		return 2
	}
	p, err := seccompprofile.OCI(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err == nil {
		var js []byte
		if js, err = json.Marshal(p); err == nil {
			fmt.Println(string(js))
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "airlock: seccomp profile: %v\n", err)
	return 1
}
