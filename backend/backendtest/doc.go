// Package backendtest is the conformance and security suite that every
// airlock backend runs: real sandboxes, real commands, and attack programs
// (python3 scripts using only the standard library) that run inside the
// sandbox and report whether each attack was stopped.
//
// A backend's tests call Run with a Config. A check that cannot apply to a
// backend is listed in Config.Skip with the reason, which the suite
// prints; nothing is skipped silently.
package backendtest
