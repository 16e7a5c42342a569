// Package docker is airlock's Docker backend: each sandbox is a container
// of the Docker Engine, created through its API with hardened defaults
// (no network, read-only root, every capability dropped,
// no-new-privileges, a seccomp profile stricter than Docker's default,
// memory without swap, a CPU quota, a pids cap, rlimits). The runtime is
// runc, or gVisor's runsc for a user-space kernel between the code and
// the host's.
//
// Images are root file systems that airlock built (package image) or any
// folder; the backend imports each once with the Engine's import API,
// tagged by content digest. The writable folders and the inputs live in
// host folders (package hostdir) bound into the container, so that the
// disk cap covers /tmp, /workspace/output and /dev/shm together and the
// artifact filter walks /workspace/output from the host.
//
// The container's pid 1 is a sleep, run as another user than commands,
// that ignores SIGCHLD, so that the kernel reaps the orphans that come to
// it. Commands run with the exec API as uid 1000. A command that ends or
// times out leaves nothing behind: with no other command running, every
// process of the sandbox user is killed (from the host through the
// container's cgroup with runc; with an exec inside with runsc, whose
// processes the host cannot see). Containers carry labels naming their
// sandbox and the airlock process that owns them; a new Backend removes
// the containers and folders of owners that died.
//
// With runc and an egress policy, the proxy's listening socket is opened
// on 127.0.0.1:3128 inside the container's network namespace, from the
// host, as the native backend does.
package docker
