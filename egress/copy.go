package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// chunk is how much of a byte budget one copy step reserves. It is large
// enough that splice(2) does the work between two TCP connections.
const chunk = 1 << 20

// noLimit is the limit of a pump that runs until its source ends.
const noLimit = -1

// pump copies src to dst until src ends or, when limit is not noLimit,
// until limit bytes have been copied (an earlier end is then an
// io.ErrUnexpectedEOF). It charges direction d and adds what it copied to
// total. It returns an error wrapping sandbox.ErrLimit when src has more
// to send than the budget allows. Reading through one io.LimitedReader
// keeps the zero-copy path of net.TCPConn.ReadFrom.
func (m *meter) pump(dst io.Writer, src io.Reader, d direction, total *atomic.Int64, limit int64) error {
	for limit != 0 {
		want := int64(chunk)
		if limit > 0 {
			want = min(want, limit)
		}
		grant := m.reserve(d, want)
		if grant == 0 {
			if err := m.overBudget(src, d); !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		}
		n, err := io.Copy(dst, io.LimitReader(src, grant))
		m.refund(d, grant-n)
		total.Add(n)
		if limit > 0 {
			limit -= n
		}
		switch {
		case err != nil:
			return err
		case n < grant && limit > 0:
			return io.ErrUnexpectedEOF
		case n < grant:
			return nil
		}
	}
	return nil
}

// overBudget is called when d's budget is spent: it reads one more byte
// from src and reports the cap only if src really had more to send, and
// io.EOF if src had ended.
func (m *meter) overBudget(src io.Reader, d direction) error {
	var one [1]byte
	if n, err := io.ReadFull(src, one[:]); n == 0 {
		return err
	}
	return m.capError(d)
}

// meteredConn charges what goes through a connection to a meter's
// budgets: writes as bytes out, reads as bytes in.
type meteredConn struct {
	net.Conn
	m         *meter
	sent, got atomic.Int64
	// hit is the cap error of the last Read or Write that reached a cap.
	hit error
}

// Read reads at most the rest of the inbound budget.
func (c *meteredConn) Read(b []byte) (int, error) {
	grant := c.m.reserve(in, int64(len(b)))
	if grant == 0 && len(b) > 0 {
		err := c.m.overBudget(c.Conn, in)
		if errors.Is(err, sandbox.ErrLimit) {
			c.hit = err
		}
		return 0, err
	}
	n, err := c.Conn.Read(b[:grant])
	c.m.refund(in, grant-int64(n))
	c.got.Add(int64(n))
	return n, err
}

// Write writes b whole, or nothing when the outbound budget cannot hold it.
func (c *meteredConn) Write(b []byte) (int, error) {
	grant := c.m.reserve(out, int64(len(b)))
	if grant < int64(len(b)) {
		c.m.refund(out, grant)
		c.hit = c.m.capError(out)
		return 0, c.hit
	}
	n, err := c.Conn.Write(b)
	c.m.refund(out, grant-int64(n))
	c.sent.Add(int64(n))
	return n, err
}
