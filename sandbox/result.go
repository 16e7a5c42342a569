package sandbox

// Result is what one command run in a sandbox gives back. The JSON field
// names are part of the CLI and HTTP contract.
type Result struct {
	ID              string  `json:"id"`
	Backend         string  `json:"backend"`
	ExitCode        int     `json:"exit_code"`
	Signal          string  `json:"signal"`
	TimedOut        bool    `json:"timed_out"`
	OOMKilled       bool    `json:"oom_killed"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	DurationMS      float64 `json:"duration_ms"`
	Usage           Usage   `json:"usage"`
	// PidsLimitHit is true when a fork failed at the pids cap.
	PidsLimitHit bool          `json:"pids_limit_hit,omitempty"`
	Artifacts    []Artifact    `json:"artifacts"`
	Egress       []EgressEvent `json:"egress"`
	// Weakened lists each layer that ran weaker than its full form on
	// this host, and how (for example "memory: RLIMIT_AS, no cgroup").
	Weakened []string `json:"weakened,omitempty"`
	// BackendDetails says how the backend ran the command where it has
	// more than one way (microvm: "accel" kvm or tcg, "guest_kernel",
	// "transport").
	BackendDetails map[string]string `json:"backend_details,omitempty"`
}

// Usage is what the command consumed.
type Usage struct {
	CPUMillis       float64 `json:"cpu_ms"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
}

// Verdicts an artifact can get.
const (
	VerdictAccepted  = "accepted"
	VerdictSanitized = "sanitized"
	VerdictRejected  = "rejected"
)

// Artifact is one file found in /workspace/output and what the artifact
// filter decided about it. Rejected files never reach the host.
type Artifact struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256,omitempty"`
	MIME    string `json:"mime,omitempty"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// ServeHint is a Content-Security-Policy or attachment hint for servers
	// that hand the file out (set for HTML and SVG).
	ServeHint string `json:"serve_hint,omitempty"`
}

// EgressEvent records one decision of the egress proxy.
type EgressEvent struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Allowed  bool   `json:"allowed"`
	Reason   string `json:"reason"`
	BytesOut int64  `json:"bytes_out,omitempty"`
	BytesIn  int64  `json:"bytes_in,omitempty"`
}

// Exit statuses of the CLI contract besides the command's own.
const (
	ExitTimeout = 124
	ExitFailed  = 125
	ExitOOM     = 137
)
