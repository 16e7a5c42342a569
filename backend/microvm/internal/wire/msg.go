package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Control message operations. Requests carry an ID and get one reply with
// the same ID; the guest also sends Hello once, Exit when a process ends,
// Egress for each connection code opens to the proxy, and Gone when the
// sandbox inside died.
const (
	OpHello  = "hello"
	OpCreate = "create"
	OpStart  = "start"
	OpSignal = "signal"
	OpFile   = "file"
	OpReply  = "reply"
	OpExit   = "exit"
	OpEgress = "egress"
	OpGone   = "gone"
)

// File operations of FileOp.
const (
	FilePut    = "put"    // Stream carries the data to the guest
	FileGet    = "get"    // Stream carries the data from the guest, after the reply
	FileStat   = "stat"   //
	FileList   = "list"   // Stream carries the JSON listing from the guest, before the reply
	FileMkdir  = "mkdir"  //
	FileRemove = "remove" //
	FileRename = "rename" //
	// FileWalk lists every entry beneath /workspace/output, depth first
	// in name order, as JSON lines of WalkEntry on Stream, never
	// following a link.
	FileWalk = "walk"
	// FileOpenOutput opens a regular file of the output folder by its
	// path relative to it, never following a link, and sends its bytes on
	// Stream after the reply, whose Info is the opened file's.
	FileOpenOutput = "open-output"
)

// Msg is one control message; Op says which fields are set.
type Msg struct {
	Op string `json:"op"`
	ID uint64 `json:"id,omitempty"`
	// Error and Kind are a reply's failure: Kind names the sandbox
	// sentinel the error wraps (see Errorf).
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`

	Hello  *Hello            `json:"hello,omitempty"`
	Create *Create           `json:"create,omitempty"`
	Start  *Start            `json:"start,omitempty"`
	Signal *Signal           `json:"signal,omitempty"`
	File   *FileOp           `json:"file,omitempty"`
	Info   *sandbox.FileInfo `json:"info,omitempty"`
	Exit   *Exit             `json:"exit,omitempty"`
	Egress uint32            `json:"egress,omitempty"`
	Ready  *Ready            `json:"ready,omitempty"`
}

// Hello is the guest agent's first message.
type Hello struct {
	// Kernel is the guest kernel's release (uname -r).
	Kernel string `json:"kernel"`
}

// Create asks the guest to make its sandbox.
type Create struct {
	ID       string            `json:"id"`
	Policy   sandbox.Policy    `json:"policy"`
	ImageEnv map[string]string `json:"image_env,omitempty"`
	// UnixNano is the host's clock, which the guest sets its own to: the
	// machine has no clock of its own to read at boot.
	UnixNano int64 `json:"unix_nano"`
	// Seed is entropy for the guest's random pool.
	Seed []byte `json:"seed"`
}

// Ready is the reply to Create.
type Ready struct {
	// Weakened lists the guest's layers that are weaker than their full
	// form on its kernel (the native backend's Capabilities, inside).
	Weakened []string `json:"weakened,omitempty"`
}

// Start starts one process. Stdin is the stream that feeds it (0: empty
// stdin); Stdout and Stderr are streams the guest writes.
type Start struct {
	Proc        uint64            `json:"proc"`
	Cmd         []string          `json:"cmd"`
	Env         map[string]string `json:"env,omitempty"`
	Dir         string            `json:"dir,omitempty"`
	Timeout     sandbox.Duration  `json:"timeout,omitempty"`
	KeepAlive   bool              `json:"keep_alive,omitempty"`
	OutputLimit int64             `json:"output_limit,omitempty"`
	Stdin       uint32            `json:"stdin,omitempty"`
	Stdout      uint32            `json:"stdout"`
	Stderr      uint32            `json:"stderr"`
}

// Signal signals one process.
type Signal struct {
	Proc   uint64 `json:"proc"`
	Signal int    `json:"signal"`
}

// Exit reports the end of a process: its Result, whose Stdout and Stderr
// hold only what the guest's sandbox added beyond what came on the
// streams (its own messages), at most MaxExtraOutput bytes each.
type Exit struct {
	Proc   uint64         `json:"proc"`
	Result sandbox.Result `json:"result"`
	Error  string         `json:"error,omitempty"`
	Kind   string         `json:"kind,omitempty"`
}

// MaxExtraOutput bounds what an Exit's Result adds to a stream's output.
const MaxExtraOutput = 4 << 10

// FileOp is one file operation.
type FileOp struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// RawPath is FileOpenOutput's path, as bytes: a name need not be
	// UTF-8, which a JSON string cannot carry unchanged.
	RawPath []byte `json:"raw_path,omitempty"`
	To      string `json:"to,omitempty"`
	Max     int64  `json:"max,omitempty"`
	Stream  uint32 `json:"stream,omitempty"`
}

// WalkEntry is one entry of a FileWalk.
type WalkEntry struct {
	// Path is relative to /workspace/output, with slashes; bytes, since
	// a name need not be UTF-8.
	Path    []byte      `json:"path"`
	Mode    fs.FileMode `json:"mode"`
	Size    int64       `json:"size"`
	Links   uint64      `json:"links"`
	ModTime time.Time   `json:"mod_time"`
	Target  string      `json:"target,omitempty"`
}

// Error kinds: the sandbox sentinels an error may wrap on the wire.
var kinds = []struct {
	name string
	err  error
}{
	{"invalid", sandbox.ErrInvalid},
	{"not_found", sandbox.ErrNotFound},
	{"exist", sandbox.ErrExist},
	{"limit", sandbox.ErrLimit},
	{"unsupported", sandbox.ErrUnsupported},
	{"destroyed", sandbox.ErrDestroyed},
	{"died", sandbox.ErrDied},
}

// KindOf names the sentinel err wraps, or "".
func KindOf(err error) string {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return ""
}

// Errorf rebuilds an error of the peer's: its message, wrapping the
// sentinel its kind names. An unknown kind wraps none.
func Errorf(msg, kind string) error {
	for _, k := range kinds {
		if k.name == kind {
			return fmt.Errorf("%s: %w", msg, k.err)
		}
	}
	return errors.New(msg)
}

// Decode parses one control message, refusing trailing data.
func Decode(b []byte) (Msg, error) {
	var m Msg
	if err := json.Unmarshal(b, &m); err != nil {
		return Msg{}, fmt.Errorf("control message: %v: %w", err, ErrProtocol)
	}
	if m.Op == "" {
		return Msg{}, fmt.Errorf("control message without an op: %w", ErrProtocol)
	}
	return m, nil
}

// SendMsg encodes and sends one control message.
func (c *Conn) SendMsg(m Msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return c.Send(b)
}
