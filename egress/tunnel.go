package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// alertUnrecognizedName is a fatal TLS alert record, unrecognized_name
// (RFC 6066), sent when the SNI of a tunnel is refused.
const alertUnrecognizedName = "\x15\x03\x01\x00\x02\x02\x70"

// notTLSReason answers a tunnel that starts with something other than a
// TLS ClientHello, which is usually plain HTTP sent through CONNECT.
const notTLSReason = "tunnels carry TLS only; send plain HTTP to the proxy as absolute-URI requests"

// tunnelProto is what differs between CONNECT and SOCKS5: how a tunnel
// request is refused and how it is accepted.
type tunnelProto struct {
	refuse func(reason string)
	accept func() error
}

// tunnel decides a CONNECT or SOCKS5 request and, if it is allowed, reads
// the TLS ClientHello, checks its SNI, dials the checked address and
// relays bytes until either side ends or a cap is hit.
func (s *session) tunnel(ctx context.Context, h Host, port int, tp tunnelProto) {
	host := h.String()
	v := s.grant(ctx, h, port)
	if !v.allowed {
		tp.refuse(v.reason)
		return
	}
	defer s.p.meter.release()
	if tp.accept() != nil {
		return
	}
	if why := s.checkClientHello(h); why != "" {
		s.record(ctx, host, port, false, why)
		return
	}
	up, err := s.p.dialAny(ctx, v.addrs, port)
	if err != nil {
		s.record(ctx, host, port, true, v.reason+"; connecting failed: "+err.Error())
		return
	}
	if !s.p.track(up) {
		return
	}
	defer s.p.forget(up, false)
	idx := s.record(ctx, host, port, true, v.reason)
	var sent, got atomic.Int64
	err = s.relay(up, &sent, &got)
	s.p.events.addBytes(idx, sent.Load(), got.Load())
	s.capEvent(ctx, host, port, err)
}

// grant decides a destination and takes an upstream connection slot for
// it. A refusal (by the rules or the connection cap) is recorded here and
// its reason returned in the verdict; the caller answers the client. When
// the verdict allows, the caller must release the slot.
func (s *session) grant(ctx context.Context, h Host, port int) verdict {
	v := s.p.decide(ctx, h, port)
	if v.allowed && !s.p.meter.acquire() {
		v = deny("max_connections cap of %d reached", s.p.meter.lim.maxConns)
	}
	if !v.allowed {
		s.record(ctx, h.String(), port, false, v.reason)
	}
	return v
}

// checkClientHello reads the ClientHello of an accepted tunnel and returns
// why the tunnel must be refused, or "". The server name must be the
// tunnel's host; a tunnel to an IP literal (allowed by a CIDR rule) needs
// no server name, since clients send none for addresses.
func (s *session) checkClientHello(h Host) string {
	s.readWithin(handshakeTimeout)
	sni, err := peekServerName(s.br)
	switch {
	case errors.Is(err, errNotTLS):
		s.conn.Write(httpRefusal(403, notTLSReason))
		return notTLSReason
	case err != nil:
		return "no TLS ClientHello: " + s.lifetimeError(err).Error()
	case h.IsAddr():
		return ""
	case sni == "":
		io.WriteString(s.conn, alertUnrecognizedName)
		return "TLS ClientHello has no server name (SNI)"
	}
	if sh, err := ParseHost(sni); err != nil || sh != h {
		io.WriteString(s.conn, alertUnrecognizedName)
		return fmt.Sprintf("TLS server name %q differs from the tunnel host %s", cleanHost(sni), h)
	}
	return ""
}

// relay replays what the client has sent so far to up and then copies
// both ways. Each direction is charged to its budget; the lifetime cap is
// a deadline on both connections. It returns the first error that is not
// an orderly end.
func (s *session) relay(up net.Conn, sent, got *atomic.Int64) error {
	s.conn.SetDeadline(s.deadline)
	up.SetDeadline(s.deadline)
	m := &s.p.meter
	pending, _ := s.br.Peek(s.br.Buffered())
	if err := m.pump(up, bytes.NewReader(pending), out, sent, noLimit); err != nil {
		return err
	}
	s.br.Discard(len(pending))
	var (
		wg   sync.WaitGroup
		once sync.Once
		errs [2]error
	)
	flow := func(d direction, dst, src net.Conn, total *atomic.Int64) {
		defer wg.Done()
		if errs[d] = m.pump(dst, src, d, total, noLimit); errs[d] != nil {
			once.Do(func() { s.conn.Close(); up.Close() })
			return
		}
		closeWrite(dst)
	}
	wg.Add(2)
	go flow(out, up, s.conn, sent)
	go flow(in, s.conn, up, got)
	wg.Wait()
	return errors.Join(errs[:]...)
}

// closeWrite half-closes a TCP connection so that the peer sees the end of
// the other side's data; other connections are left as they are.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
