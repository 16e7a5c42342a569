package egress

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// SOCKS5 constants (RFC 1928).
const (
	socksNoAuth       = 0x00
	socksNoMethod     = 0xff
	socksCmdConnect   = 0x01
	socksAtypIPv4     = 0x01
	socksAtypName     = 0x03
	socksAtypIPv6     = 0x04
	socksOK           = 0x00
	socksNotAllowed   = 0x02
	socksCmdNotSupp   = 0x07
	socksAtypNotSupp  = 0x08
	socksGeneralError = 0x01
)

// serveSOCKS handles a SOCKS5 client: no authentication, CONNECT only,
// destinations as names or addresses, then the same checks as CONNECT.
func (s *session) serveSOCKS(ctx context.Context) {
	if !s.socksGreeting() {
		return
	}
	h, port, code, err := s.socksRequest()
	if err != nil {
		if code != 0 {
			s.record(ctx, socksHost(h), port, false, "SOCKS5: "+err.Error())
			s.socksReply(code)
		}
		return
	}
	s.tunnel(ctx, h, port, tunnelProto{
		refuse: func(string) { s.socksReply(socksNotAllowed) },
		accept: func() error { return s.socksReply(socksOK) },
	})
}

// socksHost names a destination for an event, even a partial one.
func socksHost(h Host) string {
	if h == (Host{}) {
		return ""
	}
	return h.String()
}

// socksGreeting reads the client's methods and picks "no authentication".
func (s *session) socksGreeting() bool {
	var hdr [2]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		return false
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(s.br, methods); err != nil {
		return false
	}
	for _, m := range methods {
		if m == socksNoAuth {
			_, err := s.conn.Write([]byte{socksVersion, socksNoAuth})
			return err == nil
		}
	}
	s.conn.Write([]byte{socksVersion, socksNoMethod})
	return false
}

// socksRequest reads a request. On error it also returns the reply code
// to send, or 0 when the client is gone.
func (s *session) socksRequest() (Host, int, byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		return Host{}, 0, 0, err
	}
	if hdr[0] != socksVersion || hdr[2] != 0 {
		return Host{}, 0, socksGeneralError, fmt.Errorf("malformed request: %w", sandbox.ErrInvalid)
	}
	h, code, err := s.socksAddr(hdr[3])
	if err != nil {
		return h, 0, code, err
	}
	var pb [2]byte
	if _, err := io.ReadFull(s.br, pb[:]); err != nil {
		return h, 0, 0, err
	}
	port := int(binary.BigEndian.Uint16(pb[:]))
	switch {
	case hdr[1] != socksCmdConnect:
		return h, port, socksCmdNotSupp, fmt.Errorf("command %d is not supported (only CONNECT): %w", hdr[1], sandbox.ErrUnsupported)
	case port == 0:
		return h, port, socksGeneralError, fmt.Errorf("port 0: %w", sandbox.ErrInvalid)
	}
	return h, port, 0, nil
}

// socksAddr reads the destination address of a request.
func (s *session) socksAddr(atyp byte) (Host, byte, error) {
	var n int
	switch atyp {
	case socksAtypIPv4:
		n = 4
	case socksAtypIPv6:
		n = 16
	case socksAtypName:
		l, err := s.br.ReadByte()
		if err != nil {
			return Host{}, 0, err
		}
		n = int(l)
	default:
		return Host{}, socksAtypNotSupp, fmt.Errorf("address type %d: %w", atyp, sandbox.ErrUnsupported)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.br, b); err != nil {
		return Host{}, 0, err
	}
	if atyp != socksAtypName {
		a, _ := netip.AddrFromSlice(b)
		return Host{Addr: a}, 0, nil
	}
	h, err := ParseHost(string(b))
	if err != nil {
		return Host{Name: string(b)}, socksNotAllowed, err
	}
	return h, 0, nil
}

// socksReply sends a reply with an empty bound address.
func (s *session) socksReply(code byte) error {
	_, err := s.conn.Write([]byte{socksVersion, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}
