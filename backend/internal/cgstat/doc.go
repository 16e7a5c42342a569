// Package cgstat finds the cgroups of a running process on a cgroup v1,
// v2 or hybrid host and reads the counters a sandbox's Result reports:
// OOM kills, pids-limit hits, CPU time and peak memory. The docker and
// gvisor backends point it at the process that holds their container's
// cgroup.
package cgstat
