package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the agent's protocol version. The backend refuses a Pod
// whose agent says another (see CmdVersion).
const Version = "1"

// Path is where the agent's binary lies in the sandbox container: the
// files container copies itself there, into a volume the sandbox
// container mounts read-only.
const Path = "/airlock/agent"

// Subcommands of the agent binary.
const (
	CmdInit       = "init"        // pid 1 of a container: reaps, keeps the container's processes in order
	CmdRun        = "run"         // one process: its shepherd, speaking the run protocol on stdin and stdout
	CmdExec       = "exec"        // what the shepherd starts: sets the limits and executes the command
	CmdFile       = "file"        // one file operation (see the File* operations)
	CmdEgress     = "egress"      // listens on sandbox.EgressAddr and announces each connection
	CmdEgressConn = "egress-conn" // splices one announced connection onto stdin and stdout
	CmdVersion    = "version"     // prints Version
	// CmdSeccompProfile prints airlock's seccomp profile, for a node's
	// kubelet (see kubernetes.Options.SeccompProfile); it runs on the
	// node, not in a Pod.
	CmdSeccompProfile = "seccomp-profile"
)

// File operations: "file OP PATH [ARG]".
const (
	FilePut    = "put"    // PATH MAX: stdin to PATH, at most MAX bytes
	FileGet    = "get"    // PATH: a dirfs.Info line, then the bytes
	FileStat   = "stat"   // PATH: a dirfs.Info
	FileList   = "list"   // PATH: the dirfs.Infos of a folder, sorted
	FileMkdir  = "mkdir"  // PATH
	FileRemove = "remove" // PATH
	FileRename = "rename" // FROM TO
	FileTar    = "tar"    // PATH: the folder as a tar stream
)

// Frame kinds of the run protocol. Each frame is one kind byte, a 4-byte
// big-endian length and that many bytes.
const (
	// From the backend to the shepherd.
	FrameSpec   byte = 'S' // RunSpec, JSON; the first frame
	FrameStdin  byte = 'I' // bytes for the process's stdin
	FrameEOF    byte = 'E' // stdin ends
	FrameSignal byte = 'K' // one byte: a signal for the process
	FrameKill   byte = 'X' // kill the process and everything it started (its exit still comes)
	// From the shepherd to the backend.
	FrameStarted byte = 'P' // Started, JSON
	FrameStdout  byte = 'O' // bytes the process wrote to stdout
	FrameStderr  byte = 'R' // bytes the process wrote to stderr
	FrameExit    byte = 'W' // Exit, JSON; the last frame
)

// MaxFrame bounds a frame's payload; data frames carry at most
// DataChunk bytes.
const (
	MaxFrame  = 1 << 20
	DataChunk = 32 << 10
)

// RunSpec is one process for the shepherd to start.
type RunSpec struct {
	Argv []string `json:"argv"`
	// Env is the whole environment, "K=V" pairs.
	Env []string `json:"env"`
	Dir string   `json:"dir"`
	// Stdin gives the process a stdin pipe fed by FrameStdin; otherwise
	// its stdin is /dev/null.
	Stdin bool `json:"stdin"`
	// Keep is how many bytes of stdout and of stderr, each, the backend
	// keeps; unless Stream is set, the shepherd sends no more than that
	// and only counts the rest.
	Keep   int64 `json:"keep"`
	Stream bool  `json:"stream"`
	// Timeout, in nanoseconds, kills the process and everything it
	// started when it passes; 0 means none.
	Timeout int64 `json:"timeout_ns"`
	// Limits for the process and what it starts.
	NProc  uint64 `json:"nproc"`
	NoFile uint64 `json:"nofile"`
	FSize  uint64 `json:"fsize"`
}

// Started says the process runs, or why it could not start.
type Started struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// Exit is how the process ended and what it and everything it started
// used.
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// TimedOut: the shepherd killed the process at its timeout.
	TimedOut  bool    `json:"timed_out,omitempty"`
	CPUMillis float64 `json:"cpu_ms"`
	// MaxRSS is the peak resident memory of the largest process, bytes.
	MaxRSS int64 `json:"max_rss"`
	// StdoutBytes and StderrBytes are all the process wrote, sent or not.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Swept counts the processes killed after the process ended.
	Swept int `json:"swept,omitempty"`
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes is over the limit of %d", len(payload), MaxFrame)
	}
	var h [5]byte
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// WriteJSON writes one frame of v as JSON.
func WriteJSON(w io.Writer, kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, kind, b)
}

// ErrFrame means a frame broke the protocol.
var ErrFrame = errors.New("bad frame")

// ReadFrame reads one frame; its payload is a new slice. io.EOF comes
// only before a frame's first byte.
func ReadFrame(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:1]); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(r, h[1:]); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrFrame, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	return h[0], b, nil
}

// A file operation that fails writes one dirfs.Error as JSON on stderr
// and exits with status 1; one that succeeds writes its answer (a
// dirfs.Info, a list of them, or for get a dirfs.Info line and then the
// bytes) on stdout.

// The folders the file operations reach, as the files container mounts
// them (at the same paths as the sandbox container).
const (
	InputDir  = "/workspace/input"
	OutputDir = "/workspace/output"
	TmpDir    = "/tmp"
)
