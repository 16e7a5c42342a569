// Package gvisor is airlock's gVisor backend: each sandbox is a runsc
// container started directly (no daemon) from an OCI bundle that the
// backend writes. The code inside talks to gVisor's user-space kernel,
// the sentry, never to the host's; runsc runs with no network, applies
// the seccomp profile inside the sandbox (--oci-seccomp), and caps memory,
// CPU and the sentry's threads with cgroups; the sandbox's tasks are
// capped by RLIMIT_NPROC, which the sentry enforces.
//
// The root is an image's folder, or for the "host" image the host's
// system folders bound read-only under a made-up /etc (package hostroot),
// always read-only. The writable folders and the inputs are host folders
// bound in (package hostdir), as with the docker backend. The container's
// pid 1 is a sleep, running as another user, that ignores SIGCHLD so that
// orphans are reaped at once; each command is a runsc exec as uid 1000
// under a shell that, when the command ended and no other runs, kills
// every process of the sandbox user before it exits.
//
// With an egress policy, the proxy listens on a unix socket bound into
// the sandbox (runsc --host-uds=open), and a forwarder inside relays
// 127.0.0.1:3128 to it (see egress_linux.go).
//
// Each sandbox keeps its bundle and runsc's state in its own folder under
// /run/airlock/gvisor, named after the airlock process that owns it. A
// sandbox outlives an airlock process killed with SIGKILL; the next
// Backend of another process deletes it and its folder.
package gvisor
