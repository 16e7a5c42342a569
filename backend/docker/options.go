package docker

import (
	"log/slog"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
)

// Runtimes the backend can run containers with.
const (
	// RuntimeRunc is Docker's default runtime: namespaces and cgroups on
	// the host's kernel.
	RuntimeRunc = "runc"
	// RuntimeRunsc is gVisor: the code talks to a user-space kernel.
	RuntimeRunsc = "runsc"
)

// Options configure the docker backend.
type Options struct {
	// Runtime is RuntimeRunc (the default) or RuntimeRunsc; the daemon
	// must know it by that name.
	Runtime string
	// Host is the Docker Engine's address; empty means $DOCKER_HOST, else
	// the local socket. The daemon must run on this machine: the sandbox's
	// folders are host folders.
	Host string
	// Images resolves image names; nil means only folder paths are
	// accepted.
	Images image.Lookup
	// StateDir holds the sandboxes' host folders. Default
	// /run/airlock/docker.
	StateDir string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
	// EgressHooks replace the egress proxy's lookups and dials. They are
	// for tests; no policy can set them.
	EgressHooks egress.Hooks
}
