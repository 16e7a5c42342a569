package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"golang.org/x/sys/unix"
)

// The supervisor (the airlock process) and the sandbox's init talk over a
// SOCK_SEQPACKET socket pair: one JSON message per packet, file
// descriptors passed alongside with SCM_RIGHTS. Large payloads never cross
// this socket; they travel through pipes passed as descriptors.

// Message operations.
const (
	OpHello  = "hello"  // init -> supervisor: started, waiting for its config
	OpConfig = "config" // supervisor -> init: the root to build; fds: its binds (see EntryBind)
	OpReady  = "ready"  // init -> supervisor: root built; fds: output dir, egress listener
	OpExec   = "exec"   // supervisor -> init: start a command; fds: stdin, stdout, stderr, status, spec, cgroups
	OpSignal = "signal" // supervisor -> init: send Signal to the process of exec Target
	OpSweep  = "sweep"  // supervisor -> init: kill what exec Target left (no cgroups)
	OpFile   = "file"   // supervisor -> init: a file operation; fds: its data pipe
	OpDone   = "done"   // init -> supervisor: request Seq finished
)

// maxPacket bounds one control message; configs and listings are at most
// a few hundred kilobytes.
const maxPacket = 4 << 20

// recvBufSize is the buffer a channel keeps for the usual small packets.
const recvBufSize = 64 << 10

// maxFDs bounds the descriptors one message may carry: a config carries
// one per top-level folder of an image.
const maxFDs = 64

// Message is one packet on the control socket.
type Message struct {
	Op     string  `json:"op"`
	Seq    uint64  `json:"seq,omitempty"`
	Target uint64  `json:"target,omitempty"`
	Signal int     `json:"signal,omitempty"`
	Pid    int     `json:"pid,omitempty"`
	Error  string  `json:"error,omitempty"`
	Config *Config `json:"config,omitempty"`
	File   *FileOp `json:"file,omitempty"`
	// Info answers a file operation about one entry.
	Info *dirfs.Info `json:"info,omitempty"`
	// FileError is a failed file operation, with its kind.
	FileError *dirfs.Error `json:"file_error,omitempty"`
}

// File operations.
const (
	FilePut    = "put"    // fd: the read end of the data
	FileGet    = "get"    // fd: the write end for the data
	FileStat   = "stat"   //
	FileList   = "list"   // fd: the write end for the entries, as JSON
	FileMkdir  = "mkdir"  //
	FileRemove = "remove" //
	FileRename = "rename" // Path to To
)

// FileOp is one file operation inside the sandbox.
type FileOp struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	To   string `json:"to,omitempty"`
	Max  int64  `json:"max,omitempty"`
}

// Channel is one end of the control socket. It drives sendmsg and
// recvmsg through the runtime's poller (os.File's SyscallConn), so a
// goroutine waiting for a message parks instead of holding an OS thread
// and, in init, its only P. It does not use package net, whose
// initialisation would delay init's start (see reexec).
type Channel struct {
	f       *os.File
	rc      syscall.RawConn
	recvBuf []byte
	recvOOB []byte
}

// NewChannel takes ownership of an inherited or fresh socket descriptor.
func NewChannel(f *os.File) (*Channel, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	nf := os.NewFile(uintptr(fd), "airlock-control") // non-blocking: served by the poller
	rc, err := nf.SyscallConn()
	if err != nil {
		nf.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &Channel{f: nf, rc: rc, recvBuf: make([]byte, recvBufSize), recvOOB: make([]byte, unix.CmsgSpace(maxFDs*4))}, nil
}

// SocketPair makes the two ends of a control socket.
func SocketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "airlock-control"), os.NewFile(uintptr(fds[1]), "airlock-control"), nil
}

// Send writes one Message with optional descriptors. Concurrent sends are
// safe: each is one sendmsg call on a packet socket.
func (ch *Channel) Send(m Message, files ...*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	var serr error
	err = ch.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
		return serr != unix.EAGAIN && serr != unix.EINTR
	})
	runtime.KeepAlive(files)
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("control send %s: %w", m.Op, err)
	}
	return nil
}

// errClosed reports that the other end went away.
var errClosed = errors.New("control socket closed")

// Recv reads one Message and the descriptors that came with it. Only one
// goroutine may receive at a time. A packet's size is peeked first, so the
// channel keeps a small buffer and borrows a larger one for a large packet.
func (ch *Channel) Recv() (Message, []*os.File, error) {
	var n, oobn, flags int
	var rerr error
	buf := ch.recvBuf
	err := ch.rc.Read(func(fd uintptr) bool {
		n, _, _, _, rerr = unix.Recvmsg(int(fd), buf[:1], nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
		if rerr == unix.EAGAIN || rerr == unix.EINTR {
			return false
		}
		if rerr == nil && n > len(buf) && n <= maxPacket {
			buf = make([]byte, n)
		}
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, ch.recvOOB, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return Message{}, nil, fmt.Errorf("control receive: %w", err)
	}
	files, ferr := parseRights(ch.recvOOB[:oobn])
	if n == 0 && oobn == 0 {
		return Message{}, nil, errClosed
	}
	if ferr != nil || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		CloseAll(files)
		return Message{}, nil, fmt.Errorf("control receive: truncated or malformed message (flags %#x): %v", flags, ferr)
	}
	var m Message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		CloseAll(files)
		return Message{}, nil, fmt.Errorf("control receive: %w", err)
	}
	return m, files, nil
}

// Close closes the socket; a Recv waiting on it returns an error. It is
// safe to call more than once.
func (ch *Channel) Close() error {
	err := ch.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, cm := range msgs {
		fds, err := unix.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "airlock-passed-fd"))
		}
	}
	return files, nil
}

func CloseAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
