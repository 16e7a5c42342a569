// Package procs holds the part of the container backends (docker, gvisor)
// that follows a sandbox's processes: admission and the sandbox's end
// (Done, Err), each process's run to its Result (timeout, sweep, output,
// exit status, usage), the lock that keeps sweeps and placements apart,
// and the rule that a panic in a goroutine serving one sandbox ends that
// sandbox only. What differs per runtime is behind Ops.
package procs
