// Package wire is the protocol between the microvm backend's host side
// and its guest agent: many streams and one control channel multiplexed
// on one connection (a virtio-serial port or a vsock socket).
//
// A frame is an 8-byte header and a payload:
//
//	stream  uint32, big endian   0 for control messages
//	type    uint8                Control, Data, Window, Close or Reset
//	length  uint24, big endian   the payload's length
//
// Control frames (stream 0) carry one JSON message each, at most
// MaxControl bytes. Data frames carry at most MaxData bytes of one
// stream. Window frames carry a 4-byte credit: the receiver of a stream
// grants its sender that many more bytes. Close says the sender will
// write no more on the stream (a half close); Reset abandons the stream
// both ways. Both have empty payloads.
//
// Flow control is per stream: a sender may have at most the receiver's
// window (Window bytes at the start, then what Window frames grant) in
// flight, and a receiver buffers no more than that. A frame that breaks
// any rule (an unknown type, a length over its bound, data past the
// window, a control frame on a stream) ends the connection: the host
// treats the guest as hostile once code has run in it, and a bad frame
// ends that one sandbox, never the host process.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	TypeControl = 1
	TypeData    = 2
	TypeWindow  = 3
	TypeClose   = 4
	TypeReset   = 5
)

// Bounds of the protocol.
const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 8
	// MaxData is the largest payload of a data frame.
	MaxData = 32 << 10
	// MaxControl is the largest control message.
	MaxControl = 1 << 20
	// Window is the credit every stream starts with, each way, and the
	// most a receiver buffers for one stream.
	Window = 256 << 10
	// MaxStreams bounds the streams open on one connection at once.
	MaxStreams = 1024
)

// ErrProtocol means the peer broke the protocol; the connection ends.
var ErrProtocol = errors.New("protocol violation")

// Frame is one frame read from the connection.
type Frame struct {
	Stream  uint32
	Type    uint8
	Payload []byte
}

// maxPayload is the bound on a frame's payload by its type.
func maxPayload(typ uint8) (int, bool) {
	switch typ {
	case TypeControl:
		return MaxControl, true
	case TypeData:
		return MaxData, true
	case TypeWindow:
		return 4, true
	case TypeClose, TypeReset:
		return 0, true
	}
	return 0, false
}

// ReadFrame reads one frame and checks it against the protocol's bounds
// before it reads the payload, so that a hostile peer cannot make it
// allocate more than MaxControl bytes. The payload is freshly allocated.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Stream: binary.BigEndian.Uint32(h[0:4]), Type: h[4]}
	n := int(h[5])<<16 | int(h[6])<<8 | int(h[7])
	limit, ok := maxPayload(f.Type)
	switch {
	case !ok:
		return Frame{}, fmt.Errorf("frame type %d: %w", f.Type, ErrProtocol)
	case n > limit:
		return Frame{}, fmt.Errorf("frame type %d: %d bytes, over %d: %w", f.Type, n, limit, ErrProtocol)
	case f.Type == TypeWindow && n != 4:
		return Frame{}, fmt.Errorf("window frame of %d bytes: %w", n, ErrProtocol)
	case (f.Type == TypeControl) != (f.Stream == 0):
		return Frame{}, fmt.Errorf("frame type %d on stream %d: %w", f.Type, f.Stream, ErrProtocol)
	}
	f.Payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}

// appendFrame appends the encoding of one frame to b.
func appendFrame(b []byte, stream uint32, typ uint8, payload []byte) []byte {
	n := len(payload)
	b = binary.BigEndian.AppendUint32(b, stream)
	b = append(b, typ, byte(n>>16), byte(n>>8), byte(n))
	return append(b, payload...)
}

// WriteFrame writes one frame; it checks the payload's bound.
func WriteFrame(w io.Writer, stream uint32, typ uint8, payload []byte) error {
	if limit, ok := maxPayload(typ); !ok || len(payload) > limit {
		return fmt.Errorf("frame type %d with %d bytes: %w", typ, len(payload), ErrProtocol)
	}
	_, err := w.Write(appendFrame(make([]byte, 0, HeaderSize+len(payload)), stream, typ, payload))
	return err
}
