package sandbox

import (
	"fmt"
	"strings"
	"time"
)

// Policy is everything a caller can set about one sandbox, layer by layer.
// The zero value of each field means "the default"; Normalize fills them in.
type Policy struct {
	Limits    Limits            `json:"limits"`
	Network   NetworkPolicy     `json:"network"`
	Artifacts ArtifactPolicy    `json:"artifacts"`
	Env       map[string]string `json:"env,omitempty"`
	// Strict refuses to run when the host can only give a weaker form of a
	// layer (for example rlimits instead of cgroups when rootless), instead
	// of running and reporting the weaker layer in Result.Weakened.
	Strict bool `json:"strict,omitempty"`
}

// Limits are the resource caps of the resources layer.
type Limits struct {
	// Timeout is the wall-clock time one command may run.
	Timeout Duration `json:"timeout,omitempty"`
	// MemoryBytes caps memory (RAM, no swap), tmpfs pages included.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUs is the CPU quota in cores (0.5 = half a core).
	CPUs float64 `json:"cpus,omitempty"`
	// Pids caps the number of processes and threads.
	Pids int `json:"pids,omitempty"`
	// DiskBytes caps all writable space together: /tmp, /workspace/output
	// and /dev/shm. It also caps the size of any single file.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// DiskInodes caps the number of files in that writable space.
	DiskInodes int64 `json:"disk_inodes,omitempty"`
	// OutputBytes caps what is kept of stdout and of stderr, each.
	OutputBytes int64 `json:"stdout_limit_bytes,omitempty"`
	// OpenFiles caps open file descriptors per process (at least 64: the
	// sandbox's init lives under the same cap).
	OpenFiles int `json:"open_files,omitempty"`
	// InputBytes caps the files under /workspace/input together.
	InputBytes int64 `json:"input_bytes,omitempty"`
}

// DefaultLimits are the caps used where a Policy leaves a field zero.
var DefaultLimits = Limits{
	Timeout:     Duration(30 * time.Second),
	MemoryBytes: 512 << 20,
	CPUs:        1,
	Pids:        128,
	DiskBytes:   256 << 20,
	OutputBytes: 1 << 20,
	OpenFiles:   1024,
	InputBytes:  1 << 30,
}

// Bounds that a limit may not cross; anything outside is a caller error.
const (
	minMemory  = 16 << 20
	maxMemory  = 1 << 40
	minDisk    = 1 << 20
	maxDisk    = 1 << 40
	maxTimeout = 24 * time.Hour
	maxCPUs    = 1024
	maxPids    = 1 << 22
	maxOutput  = 1 << 30
	maxFiles   = 1 << 20
)

// NetworkPolicy is the network layer. With no Allow rules the sandbox has
// no network at all (only lo).
type NetworkPolicy struct {
	Allow []EgressRule `json:"allow,omitempty"`
	// MaxConnections caps concurrent proxied connections.
	MaxConnections int `json:"max_connections,omitempty"`
	// MaxBytesOut and MaxBytesIn cap the bytes sent and received in total.
	MaxBytesOut int64 `json:"max_bytes_out,omitempty"`
	MaxBytesIn  int64 `json:"max_bytes_in,omitempty"`
	// MaxConnDuration caps how long one connection may stay open.
	MaxConnDuration Duration `json:"max_conn_duration,omitempty"`
}

// EgressRule allows one destination: a host name pattern ("example.com",
// "*.example.com") or a CIDR, on the listed ports (default 80 and 443).
type EgressRule struct {
	Host  string `json:"host,omitempty"`
	CIDR  string `json:"cidr,omitempty"`
	Ports []int  `json:"ports,omitempty"`
}

// Enabled reports whether any egress is allowed.
func (n NetworkPolicy) Enabled() bool { return len(n.Allow) > 0 }

// ArtifactPolicy is the artifacts layer: what may leave /workspace/output.
type ArtifactPolicy struct {
	MaxFiles      int   `json:"max_files,omitempty"`
	MaxFileBytes  int64 `json:"max_file_bytes,omitempty"`
	MaxTotalBytes int64 `json:"max_total_bytes,omitempty"`
	MaxDepth      int   `json:"max_depth,omitempty"`
	MaxPathLen    int   `json:"max_path_len,omitempty"`
	// Extensions is the allowlist of file extensions, lower case, no dot.
	Extensions []string `json:"extensions,omitempty"`
	// ActiveContent says what happens to HTML and SVG with scripts:
	// "sanitize" (default) removes it, "reject" refuses the file.
	ActiveContent string `json:"active_content,omitempty"`
	// AllowHidden lets out files and folders whose name starts with a dot
	// (".env", ".git/config", ".npmrc"). By default they are rejected: tools
	// read such files without being asked, and a listing hides them.
	AllowHidden bool `json:"allow_hidden,omitempty"`
	// Archive caps, checked while streaming zip and OOXML files.
	MaxArchiveEntries int   `json:"max_archive_entries,omitempty"`
	MaxArchiveBytes   int64 `json:"max_archive_bytes,omitempty"`
	MaxArchiveRatio   int   `json:"max_archive_ratio,omitempty"`
}

// RefuseWeak fails, wrapping ErrUnsupported, when the policy is Strict
// and weak, the layers the host can only give in a weaker form, is not
// empty; where says whose layers they are ("this host", "this daemon").
func (p Policy) RefuseWeak(where string, weak []string) error {
	if !p.Strict || len(weak) == 0 {
		return nil
	}
	return fmt.Errorf("strict policy, but %s can only give weaker layers: %s: %w", where, strings.Join(weak, "; "), ErrUnsupported)
}

// Normalize fills zero fields with defaults and checks every value, so that
// a backend receives a complete, sane policy. Errors wrap ErrInvalid.
func (p Policy) Normalize() (Policy, error) {
	l := &p.Limits
	d := DefaultLimits
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = d.DiskBytes
	}
	if l.DiskInodes == 0 {
		l.DiskInodes = max(1024, l.DiskBytes/(16<<10))
	}
	if l.OutputBytes == 0 {
		l.OutputBytes = d.OutputBytes
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	if l.InputBytes == 0 {
		l.InputBytes = d.InputBytes
	}
	checks := []struct {
		ok   bool
		name string
		val  string
		want string
	}{
		{l.Timeout > 0 && time.Duration(l.Timeout) <= maxTimeout, "timeout", l.Timeout.String(), "between 0 and 24h"},
		{l.MemoryBytes >= minMemory && l.MemoryBytes <= maxMemory, "memory", FormatSize(l.MemoryBytes), "between 16MiB and 1TiB"},
		{l.CPUs > 0 && l.CPUs <= maxCPUs, "cpus", fmt.Sprint(l.CPUs), "between 0 and 1024"},
		{l.Pids >= 1 && l.Pids <= maxPids, "pids", fmt.Sprint(l.Pids), "between 1 and 4194304"},
		{l.DiskBytes >= minDisk && l.DiskBytes <= maxDisk, "disk", FormatSize(l.DiskBytes), "between 1MiB and 1TiB"},
		{l.DiskInodes >= 16 && l.DiskInodes <= 1<<32, "disk inodes", fmt.Sprint(l.DiskInodes), "between 16 and 2^32"},
		{l.OutputBytes >= 1 && l.OutputBytes <= maxOutput, "stdout limit", FormatSize(l.OutputBytes), "between 1B and 1GiB"},
		{l.OpenFiles >= 64 && l.OpenFiles <= maxFiles, "open files", fmt.Sprint(l.OpenFiles), "between 64 and 1048576"},
		{l.InputBytes >= minDisk && l.InputBytes <= maxDisk, "input", FormatSize(l.InputBytes), "between 1MiB and 1TiB"},
	}
	for _, c := range checks {
		if !c.ok {
			return p, fmt.Errorf("%s %s is out of range (%s): %w", c.name, c.val, c.want, ErrInvalid)
		}
	}
	for k, v := range p.Env {
		if err := CheckEnv(k, v); err != nil {
			return p, err
		}
	}
	for i, r := range p.Network.Allow {
		if (r.Host == "") == (r.CIDR == "") {
			return p, fmt.Errorf("egress rule %d: give exactly one of host or cidr: %w", i, ErrInvalid)
		}
		for _, port := range r.Ports {
			if port < 1 || port > 65535 {
				return p, fmt.Errorf("egress rule %d: port %d out of range: %w", i, port, ErrInvalid)
			}
		}
	}
	return p, nil
}

// CheckEnv refuses an environment variable that the kernel or a shell
// would misread: an empty name, a name with '=' or NUL, a value with NUL.
func CheckEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("environment name %q: must be non-empty without '=' or NUL: %w", k, ErrInvalid)
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("environment variable %s: value contains NUL: %w", k, ErrInvalid)
	}
	return nil
}

// ParseEnv splits "K=V" as given to --env and checks it.
func ParseEnv(kv string) (string, string, error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return "", "", fmt.Errorf("env %q: want K=V: %w", kv, ErrInvalid)
	}
	return k, v, CheckEnv(k, v)
}
