package native

import (
	"log/slog"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
)

// Options configure the native backend.
type Options struct {
	// CgroupParent is the folder, under each cgroup hierarchy's root, that
	// holds the sandboxes' cgroups. Default "airlock".
	CgroupParent string
	// Images finds built images by name; nil means only "host" and folder
	// paths are accepted.
	Images image.Lookup
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
	// Prestart keeps this many sandboxes started ahead: namespaces made,
	// init running in its cgroup and waiting for its config, so that
	// Create only builds the root. 0 (the default) starts each sandbox on
	// demand, which suits a one-shot run; a long-lived process (a server)
	// sets 1 or more and calls Close when done.
	Prestart int
	// EgressHooks replace the egress proxy's lookups and dials. They are
	// for tests; no policy can set them.
	EgressHooks egress.Hooks
}
