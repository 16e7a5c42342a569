// Package sandbox holds the public types of airlock: the Policy that describes
// each isolation layer, the Spec of a sandbox, the ExecRequest of one command,
// the Result that comes back, and the Backend and Instance interfaces that
// every isolation backend (native, docker, gvisor, microvm) implements.
//
// A caller picks a Backend, calls Create with a Spec to get an Instance, runs
// one or more commands in it with Exec, and calls Destroy, which leaves
// nothing behind on the host.
package sandbox
