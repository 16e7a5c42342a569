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
// The runner is Python (runner/runner.py, the standard library only), its
// source passed on its command line, so that nothing of it is written into
// the sandbox:
//
//   - Python: IPython's InteractiveShell where the image has it, the way a
//     notebook kernel runs it: its display formatters make the bundles
//     (_repr_html_ for a DataFrame, PNGs of figures through
//     matplotlib-inline's backend, which shows figures shown or left open
//     after each cell and closes them) and its tracebacks the errors.
//     Elsewhere (the host image) a stdlib kernel: exec all but the last
//     statement, eval the last, repr and the _repr_*_ methods for the
//     bundle, top-level await, display(), and an Agg backend of its own
//     for matplotlib whose show() sends PNGs.
//   - bash: one interactive bash without readline, history or prompts;
//     each call is eval'd at the top level and its exit status reported,
//     an error event named ExitCode when it is not 0. SIGINT goes to bash's
//     process group, as a terminal's Ctrl-C does.
//   - JavaScript: node running runner/kernel.js under the runner: one vm
//     context, the last expression's value through util.inspect (and JSON
//     for plain objects), top-level await through node's own REPL
//     rewriting, display() and display.html, .png, .svg, .markdown, .json.
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
