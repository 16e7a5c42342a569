package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// The supervisor (the airlock process) and the sandbox's init talk over a
// SOCK_SEQPACKET socket pair: one JSON Message per packet, file
// descriptors passed alongside with SCM_RIGHTS. Large payloads never cross
// this socket; they travel through pipes passed as descriptors.

// Message operations.
const (
	OpConfig = "config" // supervisor -> init: the root to build
	OpReady  = "ready"  // init -> supervisor: root built; fds: output dir
	opPut    = "put"    // supervisor -> init: store an input file; fds: source
	OpExec   = "exec"   // supervisor -> init: start a command; fds: stdin, stdout, stderr, status, spec
	OpKill   = "kill"   // supervisor -> init: kill exec Target and what it started
	OpDone   = "done"   // init -> supervisor: request Seq finished
)

// maxPacket bounds one control Message; configs are a few kilobytes.
const maxPacket = 1 << 20

// maxFDs bounds the descriptors one Message may carry.
const maxFDs = 8

// Message is one packet on the control socket.
type Message struct {
	Op     string  `json:"op"`
	Seq    uint64  `json:"seq,omitempty"`
	Target uint64  `json:"target,omitempty"`
	Name   string  `json:"name,omitempty"`
	Error  string  `json:"error,omitempty"`
	Config *Config `json:"config,omitempty"`
}

// Channel is one end of the control socket. It uses plain blocking
// system calls rather than package net: init must start fast, and net's
// initialisation waits on packages that would run first (see reexec).
type Channel struct {
	fd      int
	recvBuf []byte
	recvOOB []byte

	// The descriptor is closed only once Close was called and no Send or
	// Recv is using it, so that a number reused by another open file is
	// never read or written.
	mu     sync.Mutex
	users  int
	closed bool
}

// NewChannel takes ownership of an inherited or fresh socket descriptor.
func NewChannel(f *os.File) (*Channel, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &Channel{fd: fd, recvBuf: make([]byte, maxPacket), recvOOB: make([]byte, unix.CmsgSpace(maxFDs*4))}, nil
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
	fd, ok := ch.acquire()
	if !ok {
		return errClosed
	}
	for {
		err = unix.Sendmsg(fd, b, oob, nil, unix.MSG_NOSIGNAL)
		if err != unix.EINTR {
			break
		}
	}
	ch.release()
	runtime.KeepAlive(files)
	if err != nil {
		return fmt.Errorf("control send %s: %w", m.Op, err)
	}
	return nil
}

// errClosed reports that the other end went away.
var errClosed = errors.New("control socket closed")

// Recv reads one Message and the descriptors that came with it. Only one
// goroutine may receive at a time.
func (ch *Channel) Recv() (Message, []*os.File, error) {
	var n, oobn, flags int
	var err error
	fd, ok := ch.acquire()
	if !ok {
		return Message{}, nil, errClosed
	}
	for {
		n, oobn, flags, _, err = unix.Recvmsg(fd, ch.recvBuf, ch.recvOOB, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	ch.release()
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
	if err := json.Unmarshal(ch.recvBuf[:n], &m); err != nil {
		CloseAll(files)
		return Message{}, nil, fmt.Errorf("control receive: %w", err)
	}
	return m, files, nil
}

// Close shuts the socket down, which wakes a receiver blocked in Recv,
// and closes it once no call uses it. It is idempotent.
func (ch *Channel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return nil
	}
	ch.closed = true
	_ = unix.Shutdown(ch.fd, unix.SHUT_RDWR)
	if ch.users == 0 {
		return unix.Close(ch.fd)
	}
	return nil
}

func (ch *Channel) acquire() (int, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return -1, false
	}
	ch.users++
	return ch.fd, true
}

func (ch *Channel) release() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.users--
	if ch.closed && ch.users == 0 {
		_ = unix.Close(ch.fd)
	}
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
