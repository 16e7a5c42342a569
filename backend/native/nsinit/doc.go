// Package nsinit is the part of the native backend that runs inside the
// sandbox: pid 1 of the sandbox's namespaces. It builds the root, serves
// the supervisor's requests over the control socket, starts each command
// on a thread that carries the command's restrictions, and reaps.
//
// The supervisor (package native) starts it by executing its own binary
// with Arg0 in argv[0]; this package's init function takes over before
// main runs. The package keeps its imports few and early in Go's package
// initialisation order, because every sandbox start waits for it.
//
// It also holds the types both sides share: the Config init builds from,
// the control Messages, the ExecSpec of a command and its ExecStatus.
package nsinit
