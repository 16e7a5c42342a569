package native

import "log/slog"

// Options configure the native backend.
type Options struct {
	// CgroupParent names the folder, under airlock's own cgroup in each
	// hierarchy (or under the hierarchy's root), that holds the sandboxes'
	// cgroups. Default "airlock".
	CgroupParent string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
	// Prestart keeps this many sandboxes started ahead: namespaces made,
	// init running in its cgroup and waiting for its config, so that
	// Create only builds the root. 0 (the default) starts each sandbox on
	// demand, which suits a one-shot run; a long-lived process (a server)
	// sets 1 or more and calls Close when done.
	Prestart int
	// TrackUnified sweeps processes with cgroup v2's cgroup.kill on the
	// unified hierarchy even where the controllers are on v1 (a hybrid
	// host), which starts every process through the exec stub as on a
	// pure v2 host. Tests use it to run the v2 path on hybrid hosts.
	TrackUnified bool
}
