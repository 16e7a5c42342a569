// Package interp is airlock's stateful interpreter: a context is a runner
// process inside a sandbox, started KeepAlive, in which variables, imports
// and functions persist between calls, as in a notebook kernel. A sandbox
// holds any number of contexts, each with its own runner, in Python,
// JavaScript (node) or bash.
//
// Each call streams events: stdout and stderr as they come, result (the
// value of the last expression as a MIME bundle: text/plain, text/html for
// a DataFrame, image/png for a figure, application/json where it applies),
// display, error (name, value, traceback), and end (execution count and
// duration). A call that runs past its timeout gets SIGINT; if it does not
// end within the grace period, or its runner dies (killed for memory, a
// fork bomb, exit), the context is restarted and a restarted event says
// so. The sandbox is not touched either way.
//
// The runner is Python (runner/runner.py, the standard library only): for
// Python it is the kernel itself, using IPython's InteractiveShell and
// display formatters where the image has IPython and a small kernel of its
// own elsewhere; for bash and JavaScript it supervises a persistent bash,
// or node running runner/kernel.js. Its source travels on its command
// line; nothing is written into the sandbox for it.
//
// Events come back on a channel of their own, never the code's stdout:
// length-prefixed JSON frames on a FIFO that a relay process copies to the
// host. Code in the context can reach that channel too, so the host treats
// every frame as untrusted: frames have a size cap, are parsed strictly,
// must belong to the call that runs, and a call has a byte budget; a frame
// that breaks a rule restarts the context. A forged frame can garble its
// own context's output, never crash the host or make it hold more than the
// budgets.
//
// Package interp imports only package sandbox: it runs on any backend
// whose processes can be KeepAlive, take stdin and be signalled.
package interp
