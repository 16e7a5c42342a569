package gvisor

import (
	"log/slog"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
)

// Options configure the gvisor backend.
type Options struct {
	// Runsc is the runsc binary; empty means "runsc" found in PATH.
	Runsc string
	// Images resolves image names other than "host"; nil means only
	// "host" and folder paths are accepted.
	Images image.Lookup
	// StateDir holds each sandbox's folder. Default /run/airlock/gvisor.
	StateDir string
	// CgroupParent is the cgroup, under each hierarchy's root, that holds
	// the sandboxes' cgroups. Default "airlock-gvisor".
	CgroupParent string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
	// EgressHooks replace the egress proxy's lookups and dials. They are
	// for tests; no policy can set them.
	EgressHooks egress.Hooks
}
