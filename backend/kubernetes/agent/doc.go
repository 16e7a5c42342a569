// Package agent is the side of the kubernetes backend that runs inside a
// sandbox Pod, as one small static program (cmd/airlock-k8s-agent), and
// the protocol the backend speaks with it over the Kubernetes exec API.
//
// A sandbox Pod has two containers. The files container runs the agent's
// image: its pid 1 ("init --install") first copies the agent into a
// volume that the sandbox container mounts read-only, then only reaps.
// The files container mounts /tmp, /workspace/output and /workspace/input
// writable; every file operation of the backend is one exec of "file OP"
// there, carried out beneath those folders by package dirfs, so that the
// code, which cannot reach that container, cannot tamper with it. The
// sandbox container runs the caller's image with the agent as pid 1
// ("init"), as uid 1000 like everything in it.
//
// Each process is one exec of "run" in the sandbox container: the
// shepherd. It reads a RunSpec frame, makes itself the child subreaper,
// starts the command in a session of its own through "exec" (which sets
// the process's rlimits and executes it), relays stdin, stdout and stderr
// as frames, enforces the timeout, and when the command ends kills
// whatever it left (orphans stay the shepherd's: it is their subreaper),
// then reports the Exit. Each process's exec stream is its own, so the
// exec API's flow control holds each one back separately. A shepherd whose
// exec stream ends (the backend's process died) kills its process.
// Init kills what reaches it as an orphan (a process whose shepherd was
// killed by the code), the agent's own processes excepted.
//
// With egress, "egress" listens on sandbox.EgressAddr inside and announces
// each connection it accepts as a line on stdout; the backend answers each
// with an exec of "egress-conn ID", which takes the connection over a unix
// socket and splices it onto the exec stream.
package agent
