//go:build linux

package backendtest

import "os/exec"

// execHost runs a command on the host, outside any sandbox.
func execHost(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
