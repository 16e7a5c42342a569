package sandbox

import (
	"context"
	"io"
	"os"
)

// Backend creates sandboxes of one kind.
type Backend interface {
	// Name is the backend's name as the CLI spells it ("native", "docker"…).
	Name() string
	// Capabilities tells, layer by layer, what this backend enforces here.
	Capabilities(ctx context.Context) Capabilities
	// Probe returns an error wrapping ErrUnsupported when the host lacks
	// what the backend needs to run at all.
	Probe(ctx context.Context) error
	// Create starts a sandbox. The policy must already be normalized.
	Create(ctx context.Context, spec Spec) (Instance, error)
	// CleanupStale removes what the sandboxes of airlock processes that
	// died left on the host (processes, mounts, cgroups, containers,
	// folders), and says what it removed. Create calls it once.
	CleanupStale(ctx context.Context) []string
	// Close releases what the backend holds (connections, prestarted
	// sandboxes); sandboxes it created are not touched.
	Close() error
}

// Instance is one running sandbox.
type Instance interface {
	ID() string
	// Exec runs one command and waits for it. Output is captured up to the
	// policy's caps and, when req.Stdout/Stderr are set, streamed to them.
	// A command that runs past its timeout is killed with everything it
	// started; the Result says TimedOut.
	Exec(ctx context.Context, req ExecRequest) (Result, error)
	// PutInput stores a file read-only at /workspace/input/NAME.
	PutInput(ctx context.Context, name string, r io.Reader) error
	// Output opens /workspace/output as a directory for the artifact
	// filter, which walks it without following links. The caller closes it.
	Output(ctx context.Context) (*os.File, error)
	// Destroy kills everything in the sandbox and removes every trace of it
	// from the host. It is idempotent.
	Destroy(ctx context.Context) error
}

// Spec describes a sandbox to create.
type Spec struct {
	// ID names the sandbox; empty means a fresh random one.
	ID string
	// Image is "host" (the host's system folders, read-only), the name of a
	// built image, or the path of a rootfs folder.
	Image string
	// Policy must have been through Policy.Normalize.
	Policy Policy
}

// ExecRequest is one command to run in an instance.
type ExecRequest struct {
	// Cmd is the program and its arguments; Cmd[0] is looked up in PATH.
	Cmd []string
	// Env adds to the policy's environment; it wins on conflicts.
	Env map[string]string
	// Dir is the working folder; default /workspace.
	Dir string
	// Stdin feeds the command; nil means empty.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive the output as it comes, in
	// addition to the capped copies in the Result.
	Stdout, Stderr io.Writer
	// Timeout overrides the policy's timeout when set.
	Timeout Duration
}

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
