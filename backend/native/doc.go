// Package native is airlock's default backend: a sandbox made of Linux
// namespaces (user, mount, pid, net, ipc, uts, cgroup), a fresh read-only
// root reached by pivot_root, cgroups v1 or v2 for memory, CPU and pids,
// an allowlist seccomp filter, Landlock, and rlimits. It needs no daemon
// and no image: the "host" image binds the host's system folders
// read-only under a synthesized /etc.
//
// Inside, every command runs under a reaper that is pid 1 of the command's
// own pid namespace, so a timeout or the end of the command kills
// everything it started, double-forked or not. The supervisor (this
// process) talks to the sandbox's init over a socket pair; if the
// supervisor dies, init and every process in the sandbox die with it, and
// the next Backend removes the cgroups they left.
//
// A program that imports this package serves as its own sandbox helper:
// the package's init function takes over when the binary is started with
// the helper markers in argv[0].
package native
