package docker

import "log/slog"

// Runtimes the backend can run containers with.
const (
	// RuntimeRunc is Docker's default runtime: namespaces and cgroups on
	// the host's kernel. The backend runs it only on a daemon with
	// --userns-remap.
	RuntimeRunc = "runc"
	// RuntimeRunsc is gVisor: the code talks to a user-space kernel.
	RuntimeRunsc = "runsc"
)

// Options configure the docker backend.
type Options struct {
	// Runtime is RuntimeRunc or RuntimeRunsc; the daemon must know it by
	// that name. Empty means runsc where the daemon has it registered,
	// else runc.
	Runtime string
	// Host is the Docker Engine's address; empty means $DOCKER_HOST, else
	// the local socket. The daemon must run on this machine: the sandbox's
	// folders are host folders.
	Host string
	// StateDir holds the sandboxes' host folders. Default
	// /run/airlock-docker: a folder that a remapped daemon's containers
	// can reach (mode 0710, group the remapped root's), which
	// /run/airlock, private to root, is not.
	StateDir string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}
