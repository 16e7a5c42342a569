package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// The supervisor (the airlock process) and the sandbox's init talk over a
// SOCK_SEQPACKET socket pair: one JSON message per packet, file
// descriptors passed alongside with SCM_RIGHTS. Large payloads never cross
// this socket; they travel through pipes passed as descriptors.

// Message operations.
const (
	opConfig = "config" // supervisor -> init: the root to build
	opReady  = "ready"  // init -> supervisor: root built; fds: output dir
	opPut    = "put"    // supervisor -> init: store an input file; fds: source
	opExec   = "exec"   // supervisor -> init: start a reaper; fds: stdin, stdout, stderr, status, spec
	opKill   = "kill"   // supervisor -> init: kill the reaper of exec Target
	opDone   = "done"   // init -> supervisor: request Seq finished
)

// maxPacket bounds one control message; configs are a few kilobytes.
const maxPacket = 1 << 20

// maxFDs bounds the descriptors one message may carry.
const maxFDs = 8

// message is one packet on the control socket.
type message struct {
	Op     string      `json:"op"`
	Seq    uint64      `json:"seq,omitempty"`
	Target uint64      `json:"target,omitempty"`
	Name   string      `json:"name,omitempty"`
	Error  string      `json:"error,omitempty"`
	Config *initConfig `json:"config,omitempty"`
}

// channel is one end of the control socket.
type channel struct {
	c *net.UnixConn
}

// newChannel wraps an inherited or fresh socket descriptor; it takes
// ownership of f.
func newChannel(f *os.File) (*channel, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("control socket is a %T, not a unix socket", c)
	}
	return &channel{c: uc}, nil
}

// socketPair makes the two ends of a control socket.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "airlock-control"), os.NewFile(uintptr(fds[1]), "airlock-control"), nil
}

// send writes one message with optional descriptors. Concurrent sends are
// safe: each is one sendmsg call on a packet socket.
func (ch *channel) send(m message, files ...*os.File) error {
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
	_, _, err = ch.c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("control send %s: %w", m.Op, err)
	}
	return nil
}

// errClosed reports that the other end went away.
var errClosed = errors.New("control socket closed")

// recv reads one message and the descriptors that came with it.
func (ch *channel) recv() (message, []*os.File, error) {
	buf := make([]byte, maxPacket)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, _, err := ch.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, nil, fmt.Errorf("control receive: %w", err)
	}
	files, ferr := parseRights(oob[:oobn])
	if n == 0 && oobn == 0 {
		return message{}, nil, errClosed
	}
	if ferr != nil || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(files)
		return message{}, nil, fmt.Errorf("control receive: truncated or malformed message (flags %#x): %v", flags, ferr)
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(files)
		return message{}, nil, fmt.Errorf("control receive: %w", err)
	}
	return m, files, nil
}

func (ch *channel) close() error { return ch.c.Close() }

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

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
