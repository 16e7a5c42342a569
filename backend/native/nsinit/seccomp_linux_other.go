//go:build linux && !amd64

package nsinit

// No seccomp table exists yet for this architecture; Probe reports the
// native backend as unsupported rather than run without the filter.
const (
	seccompArch = 0
	x32Bit      = 0
)

var syscallTable map[uint32]action
