package egress

import (
	"bufio"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// TLS wire constants (RFC 8446).
const (
	recordHandshake   = 22
	recordHeaderLen   = 5
	maxRecordLen      = 1<<14 + 256
	handshakeClient   = 1
	extServerName     = 0
	serverNameHost    = 0
	maxClientHelloLen = 1 << 15
)

// errNotTLS means a tunnel did not start with a TLS ClientHello.
var errNotTLS = errors.New("tunnel does not start with a TLS ClientHello")

// peekServerName reads the TLS ClientHello at the start of br without
// consuming it, so that its bytes can be replayed to the server, and
// returns the host name of its server_name extension ("" when there is
// none). The ClientHello may span several records.
func peekServerName(br *bufio.Reader) (string, error) {
	var msg []byte
	off := 0
	for {
		hdr, err := br.Peek(off + recordHeaderLen)
		if err != nil {
			return "", peekError(err, off)
		}
		h := hdr[off:]
		n := int(h[3])<<8 | int(h[4])
		if h[0] != recordHandshake || h[1] != 3 || n == 0 || n > maxRecordLen {
			return "", errNotTLS
		}
		rec, err := br.Peek(off + recordHeaderLen + n)
		if err != nil {
			return "", peekError(err, off)
		}
		msg = append(msg, rec[off+recordHeaderLen:]...)
		off += recordHeaderLen + n
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeClient {
			return "", errNotTLS
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if size > maxClientHelloLen {
			return "", fmt.Errorf("ClientHello of %d bytes is too large: %w", size, sandbox.ErrInvalid)
		}
		if len(msg) >= 4+size {
			return parseClientHello(msg[4 : 4+size])
		}
	}
}

// peekError explains why the ClientHello could not be read.
func peekError(err error, off int) error {
	if errors.Is(err, bufio.ErrBufferFull) {
		return fmt.Errorf("ClientHello larger than %d bytes: %w", off, sandbox.ErrInvalid)
	}
	return fmt.Errorf("reading ClientHello: %w", err)
}

// wire reads big-endian fields; a short read sets bad.
type wire struct {
	b   []byte
	bad bool
}

// take returns the next n bytes.
func (w *wire) take(n int) []byte {
	if w.bad || n > len(w.b) {
		w.bad = true
		return nil
	}
	v := w.b[:n]
	w.b = w.b[n:]
	return v
}

// uint reads an n-byte big-endian number.
func (w *wire) uint(n int) int {
	v := 0
	for _, c := range w.take(n) {
		v = v<<8 | int(c)
	}
	return v
}

// vector reads a length-prefixed field whose length takes n bytes.
func (w *wire) vector(n int) *wire {
	return &wire{b: w.take(w.uint(n)), bad: w.bad}
}

// parseClientHello finds the server name in a ClientHello body. It refuses
// a malformed message, a repeated server_name extension and a list with
// more than one host name.
func parseClientHello(body []byte) (string, error) {
	w := &wire{b: body}
	w.take(2 + 32) // legacy_version, random
	w.vector(1)    // legacy_session_id
	w.vector(2)    // cipher_suites
	w.vector(1)    // legacy_compression_methods
	if w.bad {
		return "", fmt.Errorf("malformed ClientHello: %w", sandbox.ErrInvalid)
	}
	if len(w.b) == 0 {
		return "", nil
	}
	exts := w.vector(2)
	name, seen := "", false
	for len(exts.b) > 0 && !exts.bad {
		typ := exts.uint(2)
		data := exts.vector(2)
		if typ != extServerName {
			continue
		}
		if seen {
			return "", fmt.Errorf("ClientHello repeats server_name: %w", sandbox.ErrInvalid)
		}
		seen = true
		var err error
		if name, err = parseServerName(data); err != nil {
			return "", err
		}
	}
	if exts.bad || w.bad || len(w.b) != 0 {
		return "", fmt.Errorf("malformed ClientHello extensions: %w", sandbox.ErrInvalid)
	}
	return name, nil
}

// parseServerName reads the server_name extension (RFC 6066, section 3).
func parseServerName(data *wire) (string, error) {
	list := data.vector(2)
	name := ""
	for len(list.b) > 0 && !list.bad {
		typ := list.uint(1)
		v := list.vector(2)
		if typ != serverNameHost {
			continue
		}
		if name != "" || len(v.b) == 0 {
			return "", fmt.Errorf("server_name lists more than one host name, or an empty one: %w", sandbox.ErrInvalid)
		}
		name = string(v.b)
	}
	if list.bad || data.bad || len(data.b) != 0 {
		return "", fmt.Errorf("malformed server_name extension: %w", sandbox.ErrInvalid)
	}
	return name, nil
}
