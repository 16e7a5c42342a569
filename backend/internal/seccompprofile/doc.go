// Package seccompprofile is the seccomp profile of the container backends:
// Docker's default profile made stricter. The docker backend hands it to
// the daemon as JSON; the gvisor backend turns it into the OCI form that
// runsc applies inside the sandbox (runsc --oci-seccomp).
package seccompprofile
