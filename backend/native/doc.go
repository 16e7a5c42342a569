// Package native is airlock's default backend: a sandbox made of Linux
// namespaces (user, mount, pid, net, ipc, uts, cgroup), a fresh read-only
// root reached by pivot_root, cgroups v1 or v2 for memory, CPU and pids,
// an allowlist seccomp filter, Landlock, and rlimits. It needs no daemon
// and no image: the "host" image binds the host's system folders
// read-only under a synthesized /etc.
//
// This package is the supervisor's side. The sandbox's side, init (pid 1
// of the sandbox's namespaces), is package nsinit: it starts every command
// and, when a command ends, kills whatever it left running. The supervisor
// talks to init over a socket pair; if the supervisor dies, init and every
// process in the sandbox die with it, and the next Backend removes the
// cgroups they left.
//
// A program that imports this package serves as its own sandbox init:
// nsinit's init function takes over when the binary is started with the
// init marker in argv[0].
package native
