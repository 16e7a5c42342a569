// Package watchdog keeps a container sandbox from outliving the airlock
// process that owns it. Each docker or gvisor sandbox gets a small host
// process of its own, this binary started again under the name Arg0,
// which holds a pipe from its owner and a pidfd of it. When the owner
// destroys the sandbox it writes one byte and the watchdog exits; when
// the pipe ends without that byte, or the owner exits (a SIGKILL, a
// crash, a zombie waiting for its parent), the watchdog removes the
// container or deletes the runsc sandbox and removes the sandbox's host
// folder, within a second or so.
//
// A program that imports a backend that uses watchdogs is its own
// watchdog: this package's init function catches the marker before main
// runs (see Start).
package watchdog
