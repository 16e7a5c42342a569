package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// ErrClosed means the connection or the stream is closed.
var ErrClosed = errors.New("connection closed")

// ErrReset means the peer abandoned the stream.
var ErrReset = errors.New("stream reset by the peer")

// Side says which end of the connection this is; it picks the stream ids
// each side allocates, so that the two never collide: the host's are
// odd, the guest's even.
type Side int

// The two ends.
const (
	Host Side = iota
	Guest
)

// Conn multiplexes streams and control messages over one connection.
type Conn struct {
	rw      io.ReadWriteCloser
	control func([]byte) error

	wmu sync.Mutex // one frame is written at a time, whole

	mu      sync.Mutex
	streams map[uint32]*Stream
	next    uint32
	side    Side
	err     error // why the connection ended; nil while it runs
	done    chan struct{}
	grants  map[uint32]uint32 // window credit to send, by stream
	kick    chan struct{}     // wakes grantLoop
}

// NewConn starts multiplexing on rw. control is called, from the reading
// goroutine and in order, with each control message; it must not block
// (it registers streams a message names with Accept, and hands anything
// slow to a goroutine). An error from it ends the connection.
func NewConn(rw io.ReadWriteCloser, side Side, control func([]byte) error) *Conn {
	c := &Conn{rw: rw, control: control, streams: map[uint32]*Stream{}, side: side, done: make(chan struct{}),
		grants: map[uint32]uint32{}, kick: make(chan struct{}, 1)}
	c.next = 1
	if side == Guest {
		c.next = 2
	}
	go c.readLoop()
	go c.grantLoop()
	return c
}

// Done is closed when the connection has ended; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended, or nil while it runs.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection and every stream on it.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// fail ends the connection once, with err as the reason.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	streams := c.streams
	c.streams = map[uint32]*Stream{}
	c.mu.Unlock()
	_ = c.rw.Close()
	for _, s := range streams {
		s.broken(err)
	}
	close(c.done)
}

// Send writes one control message.
func (c *Conn) Send(msg []byte) error {
	if len(msg) > MaxControl {
		return fmt.Errorf("control message of %d bytes, over %d: %w", len(msg), MaxControl, ErrProtocol)
	}
	return c.write(0, TypeControl, msg)
}

// write sends one frame; a failed write ends the connection.
func (c *Conn) write(stream uint32, typ uint8, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if err := WriteFrame(c.rw, stream, typ, payload); err != nil {
		c.fail(fmt.Errorf("write: %w", err))
		return err
	}
	return nil
}

// Open allocates a stream of this side and registers it; the caller
// names it to the peer in a control message.
func (c *Conn) Open() (*Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	if len(c.streams) >= MaxStreams {
		return nil, fmt.Errorf("%d streams open: %w", MaxStreams, ErrClosed)
	}
	id := c.next
	c.next += 2
	s := newStream(c, id)
	c.streams[id] = s
	return s, nil
}

// Accept registers a stream the peer allocated and named in a control
// message. It must be called from the control function, before the
// reading goroutine reads the stream's first frame. An id of this side's,
// one already open, or one past the bound is a protocol violation.
func (c *Conn) Accept(id uint32) (*Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	mine := id%2 == 1
	if c.side == Guest {
		mine = id%2 == 0
	}
	switch {
	case id == 0 || mine:
		return nil, fmt.Errorf("peer named stream %d, which is not its to open: %w", id, ErrProtocol)
	case c.streams[id] != nil:
		return nil, fmt.Errorf("peer opened stream %d twice: %w", id, ErrProtocol)
	case len(c.streams) >= MaxStreams:
		return nil, fmt.Errorf("peer opened more than %d streams: %w", MaxStreams, ErrProtocol)
	}
	s := newStream(c, id)
	c.streams[id] = s
	return s, nil
}

// forget removes a stream that is done both ways.
func (c *Conn) forget(s *Stream) {
	c.mu.Lock()
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
	c.mu.Unlock()
}

// Streams is how many streams are open, for tests and leak checks.
func (c *Conn) Streams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

func (c *Conn) readLoop() {
	for {
		f, err := ReadFrame(c.rw)
		if err == nil {
			err = c.dispatch(f)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = ErrClosed
			}
			c.fail(err)
			return
		}
	}
}

// dispatch handles one frame. Frames for a stream that is no longer open
// are dropped: the peer may have sent them before it learnt of a reset.
func (c *Conn) dispatch(f Frame) error {
	if f.Type == TypeControl {
		return c.control(f.Payload)
	}
	c.mu.Lock()
	s := c.streams[f.Stream]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	switch f.Type {
	case TypeData:
		return s.received(f.Payload)
	case TypeWindow:
		return s.granted(binary.BigEndian.Uint32(f.Payload))
	case TypeClose:
		s.peerClosed()
	case TypeReset:
		s.broken(ErrReset)
		c.forget(s)
	}
	return nil
}

// Stream is one flow-controlled byte stream, each way. Read and Write may
// be called from different goroutines; it is also a net.Conn's innards
// (see NetConn).
type Stream struct {
	c  *Conn
	id uint32

	mu        sync.Mutex
	cond      *sync.Cond
	buf       []byte // received, not yet read; at most Window
	recvLimit int    // how much more the peer may send before our next grant
	unacked   int    // read since the last grant
	eof       bool   // the peer closed its side
	credit    int    // what we may still send
	wclosed   bool   // we closed our side
	rclosed   bool   // we stopped reading
	err       error  // the stream is broken: reset or the connection ended
	rdead     time.Time
	wdead     time.Time
	timers    [2]*time.Timer
}

func newStream(c *Conn, id uint32) *Stream {
	s := &Stream{c: c, id: id, recvLimit: Window, credit: Window}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// ID is the stream's number on the connection.
func (s *Stream) ID() uint32 { return s.id }

// received buffers one data frame; data past the window breaks the
// protocol. Data for a stream we stopped reading is dropped.
func (s *Stream) received(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) > s.recvLimit {
		return fmt.Errorf("stream %d: %d bytes past a window of %d: %w", s.id, len(p), s.recvLimit, ErrProtocol)
	}
	if s.eof {
		return fmt.Errorf("stream %d: data after close: %w", s.id, ErrProtocol)
	}
	s.recvLimit -= len(p)
	if s.rclosed || s.err != nil {
		return nil
	}
	s.buf = append(s.buf, p...)
	s.cond.Broadcast()
	return nil
}

// grant queues n more bytes of credit for the peer; grantLoop sends it,
// so that neither a reader nor the reading goroutine waits on a write.
func (s *Stream) grant(n int) {
	if n <= 0 {
		return
	}
	c := s.c
	c.mu.Lock()
	if c.err == nil && c.streams[s.id] == s {
		c.grants[s.id] += uint32(n)
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// grantLoop sends the queued window credits until the connection ends.
func (c *Conn) grantLoop() {
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		}
		c.mu.Lock()
		grants := c.grants
		c.grants = map[uint32]uint32{}
		c.mu.Unlock()
		for id, n := range grants {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], n)
			if c.write(id, TypeWindow, b[:]) != nil {
				return
			}
		}
	}
}

// granted adds the peer's grant to what we may send.
func (s *Stream) granted(n uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(s.credit)+int64(n) > Window {
		return fmt.Errorf("stream %d: granted %d over a window of %d: %w", s.id, n, Window, ErrProtocol)
	}
	s.credit += int(n)
	s.cond.Broadcast()
	return nil
}

func (s *Stream) peerClosed() {
	s.mu.Lock()
	s.eof = true
	done := s.wclosed
	s.cond.Broadcast()
	s.mu.Unlock()
	if done {
		s.c.forget(s)
	}
}

// broken ends the stream both ways with err.
func (s *Stream) broken(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Read reads what the peer sent; io.EOF once the peer closed its side.
func (s *Stream) Read(p []byte) (int, error) {
	s.mu.Lock()
	for len(s.buf) == 0 && !s.eof && s.err == nil && !s.rclosed {
		if !s.rdead.IsZero() && !time.Now().Before(s.rdead) {
			s.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		s.cond.Wait()
	}
	if len(s.buf) == 0 {
		defer s.mu.Unlock()
		switch {
		case s.rclosed:
			return 0, ErrClosed
		case s.eof:
			return 0, io.EOF
		}
		return 0, s.err
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil // let the array go
	}
	s.unacked += n
	give := 0
	if s.unacked >= Window/4 || len(s.buf) == 0 {
		give = s.unacked
		s.unacked = 0
		s.recvLimit += give
	}
	s.mu.Unlock()
	s.grant(give)
	return n, nil
}

// Write sends p, waiting for credit as needed.
func (s *Stream) Write(p []byte) (int, error) {
	sent := 0
	for sent < len(p) {
		s.mu.Lock()
		for s.credit == 0 && s.err == nil && !s.wclosed {
			if !s.wdead.IsZero() && !time.Now().Before(s.wdead) {
				s.mu.Unlock()
				return sent, os.ErrDeadlineExceeded
			}
			s.cond.Wait()
		}
		switch {
		case s.err != nil:
			err := s.err
			s.mu.Unlock()
			return sent, err
		case s.wclosed:
			s.mu.Unlock()
			return sent, ErrClosed
		}
		n := min(len(p)-sent, s.credit, MaxData)
		s.credit -= n
		s.mu.Unlock()
		if err := s.c.write(s.id, TypeData, p[sent:sent+n]); err != nil {
			return sent, err
		}
		sent += n
	}
	return sent, nil
}

// CloseWrite tells the peer that nothing more will be written.
func (s *Stream) CloseWrite() error {
	s.mu.Lock()
	if s.wclosed || s.err != nil {
		s.mu.Unlock()
		return nil
	}
	s.wclosed = true
	done := s.eof
	s.cond.Broadcast()
	s.mu.Unlock()
	err := s.c.write(s.id, TypeClose, nil)
	if done {
		s.c.forget(s)
	}
	return err
}

// Close abandons the stream: it closes our side if still open and, when
// the peer has not closed its side, resets the stream so that the peer
// stops sending. Close is idempotent.
func (s *Stream) Close() error {
	s.mu.Lock()
	if s.rclosed && s.wclosed {
		s.mu.Unlock()
		return nil
	}
	wasClosed, peerDone, broken := s.wclosed, s.eof, s.err != nil
	s.rclosed, s.wclosed = true, true
	s.buf = nil
	for _, t := range s.timers {
		if t != nil {
			t.Stop()
		}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	defer s.c.forget(s)
	switch {
	case broken:
		return nil
	case !peerDone:
		return s.c.write(s.id, TypeReset, nil)
	case !wasClosed:
		return s.c.write(s.id, TypeClose, nil)
	}
	return nil
}

// SetReadDeadline makes Read fail with os.ErrDeadlineExceeded from t on;
// the zero time clears it.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.setDeadline(0, t) }

// SetWriteDeadline makes Write fail with os.ErrDeadlineExceeded from t
// on while it waits for credit; the zero time clears it.
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.setDeadline(1, t) }

func (s *Stream) setDeadline(k int, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k == 0 {
		s.rdead = t
	} else {
		s.wdead = t
	}
	if s.timers[k] != nil {
		s.timers[k].Stop()
		s.timers[k] = nil
	}
	if !t.IsZero() {
		s.timers[k] = time.AfterFunc(time.Until(t), func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
	}
	s.cond.Broadcast()
	return nil
}
