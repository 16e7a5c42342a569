package sandbox

import (
	"context"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// Backend creates sandboxes of one kind.
type Backend interface {
	// Name is the backend's name as the CLI spells it ("native", "docker"…).
	Name() string
	// Features says what the backend can do at all, whatever the host.
	Features() Features
	// Capabilities tells, layer by layer, how strongly this backend
	// enforces each layer on this host. Result.Weakened and Policy.Strict
	// are derived from it (see Weakened), so they agree with doctor.
	Capabilities(ctx context.Context) Capabilities
	// Probe returns an error wrapping ErrUnsupported when the host lacks
	// what the backend needs to run at all.
	Probe(ctx context.Context) error
	// Create starts a sandbox. The policy must already be normalized and
	// the image resolved.
	Create(ctx context.Context, spec Spec) (Instance, error)
	// CleanupStale removes what the sandboxes of airlock processes that
	// died left on the host (processes, mounts, cgroups, containers,
	// folders), and says what it removed. The session Manager calls it on
	// every backend when it starts.
	CleanupStale(ctx context.Context) []string
	// Close releases what the backend holds (connections, prestarted
	// sandboxes); sandboxes it created are not touched.
	Close() error
}

// FileAccess says how a backend reaches a sandbox's files.
type FileAccess string

// File access kinds.
const (
	// FilesHostDir: the writable folders are host folders (or descriptors
	// of them) that the host reads without a round trip into the sandbox.
	FilesHostDir FileAccess = "host-dir"
	// FilesStream: files travel as streams through the sandbox's agent.
	FilesStream FileAccess = "stream"
)

// Features is what a backend can do at all. It does not change with the
// host; how well a layer holds on this host is Capabilities.
type Features struct {
	// Egress: the backend can attach the egress proxy (NetworkAttacher).
	Egress bool `json:"egress"`
	// ConcurrentProcesses: several processes may run in one sandbox at once.
	ConcurrentProcesses bool `json:"concurrent_processes"`
	// KeepAlive: a process may be started to outlive the processes around it.
	KeepAlive bool `json:"keep_alive"`
	// Signals: Process.Signal delivers any signal to the process.
	Signals bool `json:"signals"`
	// TTY, Pause and Checkpoint are not offered by any backend yet.
	TTY        bool `json:"tty"`
	Pause      bool `json:"pause"`
	Checkpoint bool `json:"checkpoint"`
	// Files is how the sandbox's files are reached.
	Files FileAccess `json:"files"`
	// OwnKernel: the code does not run on the host's kernel.
	OwnKernel bool `json:"own_kernel"`
	// SurvivesOOM: a process killed for memory leaves the sandbox usable;
	// false where the runtime ends the whole sandbox (gVisor's sentry).
	SurvivesOOM bool `json:"survives_oom"`
}

// Instance is one running sandbox. It holds many processes over its life:
// short ones (one step's command) and long ones (an interpreter).
type Instance interface {
	ID() string
	// Start starts one process and returns at once. The process runs until
	// it ends, its timeout passes, it is signalled, or the sandbox ends.
	// Whatever the process starts dies with it (the sweep) unless it was
	// started KeepAlive. Errors wrap ErrInvalid for a bad spec and
	// ErrDestroyed once the sandbox is gone.
	Start(ctx context.Context, spec ProcessSpec) (Process, error)
	// Files reaches the files under /workspace and /tmp.
	Files() Files
	// Done is closed when the sandbox has ended: destroyed, or died by
	// itself (its init or kernel gone). Err then says which.
	Done() <-chan struct{}
	// Err is nil while the sandbox runs, ErrDestroyed after Destroy, and
	// the cause (wrapping ErrDied) when it died by itself.
	Err() error
	// Destroy kills everything in the sandbox and removes every trace of it
	// from the host. It is idempotent.
	Destroy(ctx context.Context) error
}

// ProcessSpec is one process to start in an instance.
type ProcessSpec struct {
	// Cmd is the program and its arguments; Cmd[0] is looked up in PATH.
	Cmd []string
	// Env adds to the policy's environment; it wins on conflicts.
	Env map[string]string
	// Dir is the working folder; default /workspace.
	Dir string
	// Stdin feeds the process; nil means empty, unless OpenStdin is set.
	Stdin io.Reader
	// OpenStdin gives the process a stdin pipe that Process.Stdin writes.
	OpenStdin bool
	// Stdout and Stderr, when set, receive all output as it comes. Only
	// what the Result keeps is capped (OutputLimit).
	Stdout, Stderr io.Writer
	// Timeout bounds the process's wall time; 0 means the policy's timeout,
	// or none for a KeepAlive process.
	Timeout Duration
	// KeepAlive exempts the process from the policy's timeout and from the
	// sweeps of other processes: it lives until it ends or the sandbox does.
	KeepAlive bool
	// OutputLimit caps what the Result keeps of stdout and of stderr, each;
	// 0 means the policy's cap.
	OutputLimit int64
}

// Process is one process started in an instance.
type Process interface {
	// ID names the process within its sandbox.
	ID() string
	// Stdin is the write end of the process's stdin when the spec asked
	// for OpenStdin, else nil. Closing it gives the process end of file.
	Stdin() io.WriteCloser
	// Signal sends sig to the process (not to what it started). It does
	// not wait; a process that has ended is not an error.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Wait waits for the process to end and for what it started to be
	// swept, and returns its Result; ctx only bounds the wait. Every call
	// returns the same Result.
	Wait(ctx context.Context) (Result, error)
}

// Files reaches a sandbox's files. Paths are absolute inside the sandbox
// and must lie under /workspace/input, /workspace/output or /tmp; no
// symbolic link is followed on the way. Errors wrap ErrInvalid for a bad
// path, ErrNotFound, ErrExist, ErrLimit (over a size cap) or ErrDestroyed.
type Files interface {
	// Put writes r to path, creating it (or replacing a regular file) and
	// the folders above it. A file put under /workspace/input is read-only
	// to the code. At most max bytes are taken (0: the folder's cap).
	Put(ctx context.Context, path string, r io.Reader, max int64) (FileInfo, error)
	// Get opens path for reading.
	Get(ctx context.Context, path string) (io.ReadCloser, FileInfo, error)
	// Stat describes path without following a link.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// List describes the entries of a folder, sorted by name.
	List(ctx context.Context, path string) ([]FileInfo, error)
	// Mkdir makes a folder and the folders above it; an existing folder is
	// not an error.
	Mkdir(ctx context.Context, path string) error
	// Remove removes a file, or a folder and everything in it.
	Remove(ctx context.Context, path string) error
	// Rename moves from to to, both in the same writable folder tree.
	Rename(ctx context.Context, from, to string) error
}

// FileInfo describes one file inside a sandbox.
type FileInfo struct {
	Path    string      `json:"path"`
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	// Target is a symbolic link's target, never followed.
	Target string `json:"target,omitempty"`
}

// IsDir tells whether the entry is a folder.
func (f FileInfo) IsDir() bool { return f.Mode.IsDir() }

// OutputDirOpener is implemented by instances whose /workspace/output the
// host can open as a folder, for the artifact filter to walk in place.
type OutputDirOpener interface {
	OpenOutputDir(ctx context.Context) (*os.File, error)
}

// OutputArchiver is implemented by instances that hand out
// /workspace/output as a tar stream, for backends without a host folder;
// the artifact filter reads it with the same rules (artifact.CollectTar).
type OutputArchiver interface {
	ArchiveOutput(ctx context.Context) (io.ReadCloser, error)
}

// PAX records by which an OutputArchiver's stream says what a tar header
// cannot: PAXLinks, the link count of a regular file (more than 1: a hard
// link), and PAXType "socket" on the FIFO entry that stands for a socket.
const (
	PAXLinks = "AIRLOCK.nlink"
	PAXType  = "AIRLOCK.type"
)

// NetworkAttacher is implemented by instances that can route egress: it
// opens a listener whose connections come from inside the sandbox, where
// processes reach it at EgressAddr. The caller serves the egress proxy on
// it and closes it. Only a sandbox created with egress rules in its policy
// can be attached.
type NetworkAttacher interface {
	ListenEgress(ctx context.Context) (net.Listener, error)
}

// EgressAddr is where processes inside reach the egress proxy.
const EgressAddr = "127.0.0.1:3128"

// Spec describes a sandbox to create.
type Spec struct {
	// ID names the sandbox; empty means a fresh random one.
	ID string
	// Image is the resolved image the root comes from.
	Image Image
	// Policy must have been through Policy.Normalize.
	Policy Policy
}

// Image is a resolved image reference: what a backend needs to build the
// sandbox's root. Resolve it once (package image) and pass it around.
type Image struct {
	// Name is how the caller named it: "host", a built image's name, or
	// a folder's path.
	Name string `json:"name"`
	// RootFS is the folder of the root file system; "" for the host's own
	// system folders.
	RootFS string `json:"rootfs,omitempty"`
	// Digest identifies a built image's content; "" otherwise.
	Digest string `json:"digest,omitempty"`
	// Env is the image's own environment for its programs.
	Env map[string]string `json:"env,omitempty"`
}

// IsHost tells whether the image is the host's own system folders.
func (i Image) IsHost() bool { return i.RootFS == "" }

// HostImage is the image of the host's own system folders, read-only.
func HostImage() Image { return Image{Name: "host"} }

// Strength says how fully a layer's mechanism is enforced.
type Strength string

// Strengths, from full to none.
const (
	Full    Strength = "full"
	Weaker  Strength = "weaker"
	Missing Strength = "missing"
)

// Mechanism is one thing a layer relies on and how well the host gives it.
type Mechanism struct {
	Layer    string   `json:"layer"`
	Name     string   `json:"name"`
	Strength Strength `json:"strength"`
	Detail   string   `json:"detail,omitempty"`
}

// Capabilities lists the mechanisms of a backend on this host.
type Capabilities struct {
	Backend    string      `json:"backend"`
	Mechanisms []Mechanism `json:"mechanisms"`
}

// Weakened lists, as Result.Weakened does, every mechanism that is not at
// full strength.
func (c Capabilities) Weakened() []string {
	var out []string
	for _, m := range c.Mechanisms {
		if m.Strength != Full {
			out = append(out, m.Layer+": "+m.Name+": "+m.Detail)
		}
	}
	return out
}

// Record is what a session says of itself beside its sandbox, for other
// airlock processes serving the same backend (replicas of airlock serve
// over one Kubernetes cluster): who owns it, how long it lives.
type Record struct {
	Owner   string    `json:"owner"`
	Backend string    `json:"backend"`
	Image   string    `json:"image"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// Idle is the session's idle timeout.
	Idle     Duration          `json:"idle"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Pooled   bool              `json:"pooled,omitempty"`
	// Policy is the sandbox's normalized policy.
	Policy Policy `json:"policy"`
}

// Recorder is implemented by instances whose backend keeps a Record
// where other airlock processes find it (see Recoverer).
type Recorder interface {
	// SetRecord stores rec with the sandbox, replacing what was there.
	SetRecord(ctx context.Context, rec Record) error
	// Touch says the sandbox was used now. It does not block; the
	// backend may coalesce calls.
	Touch()
	// Touched is when any airlock process last said so, as far as this
	// one knows; zero when none did.
	Touched() time.Time
}

// Recoverer is implemented by backends whose sandboxes other airlock
// processes can reach and use.
type Recoverer interface {
	// Recover finds sandbox id, which another airlock process may have
	// created, and returns it with its Record. Errors wrap ErrNotFound
	// when there is no such sandbox, or it has no record (no session
	// holds it), or it has ended.
	Recover(ctx context.Context, id string) (Instance, Record, error)
}
