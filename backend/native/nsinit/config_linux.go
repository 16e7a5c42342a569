package nsinit

import (
	"io/fs"
	"strings"
)

// Entry kinds of a root plan.
const (
	EntryDir     = "dir"     // Dst is created as a folder with Mode
	EntryFile    = "file"    // Dst is written with Content and Mode
	EntrySymlink = "symlink" // Dst is a symlink to Target
	// EntryBind: host path Src is bound read-only at Dst. The supervisor
	// clones it (as host root, so that any path it can read works, and
	// before anything is mounted in init's namespace) and passes the
	// detached mount with the config, one per bind entry, in order.
	EntryBind = "bind"
)

// RootEntry is one step of building the root; Dst is relative to it.
type RootEntry struct {
	Kind    string      `json:"kind"`
	Dst     string      `json:"dst"`
	Src     string      `json:"src,omitempty"`
	Target  string      `json:"target,omitempty"`
	Content string      `json:"content,omitempty"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	// Dir says a bind's source is a folder (else a file).
	Dir bool `json:"dir,omitempty"`
}

// Config is everything init needs to build the sandbox.
type Config struct {
	Hostname   string      `json:"hostname"`
	Root       []RootEntry `json:"root"`
	DiskBytes  int64       `json:"disk_bytes"`
	DiskInodes int64       `json:"disk_inodes"`
	// InputBytes caps the input folder's tmpfs.
	InputBytes int64   `json:"input_bytes"`
	UID        int     `json:"uid"`
	GID        int     `json:"gid"`
	Limits     *Limits `json:"limits"`
	// EgressPort, when set, is where init listens on the sandbox's lo for
	// the egress proxy; the listening socket goes to the supervisor.
	EgressPort int `json:"egress_port,omitempty"`
	// Sysctls are written, in order, under /proc/sys/ of the sandbox's own
	// namespaces before anything runs: per-namespace budgets (user/…) and
	// vm/memfd_noexec of the sandbox's pid namespace.
	Sysctls [][2]string `json:"sysctls,omitempty"`
	// SweepByInit says the host has no cgroup to sweep with: init kills
	// what a command left, found by the command's session.
	SweepByInit bool `json:"sweep_by_init,omitempty"`
}

// Inside paths.
const (
	Hostname     = "airlock"
	WorkspaceDir = "/workspace"
	InputDir     = "/workspace/input"
	OutputDir    = "/workspace/output"
)

// join joins clean path parts with a slash. Init uses it instead of
// path/filepath, whose package initialisation would come before init's
// own and delay every sandbox start.
func join(parts ...string) string { return strings.Join(parts, "/") }
