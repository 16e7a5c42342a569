package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// pair connects a host and a guest Conn over an in-memory pipe; each
// side's control messages go to its channel.
func pair(t *testing.T) (host, guest *Conn, hostMsgs, guestMsgs chan []byte) {
	t.Helper()
	a, b := net.Pipe()
	hostMsgs, guestMsgs = make(chan []byte, 16), make(chan []byte, 16)
	host = NewConn(a, Host, func(m []byte) error { hostMsgs <- m; return nil })
	guest = NewConn(b, Guest, func(m []byte) error { guestMsgs <- m; return nil })
	t.Cleanup(func() { host.Close(); guest.Close() })
	return host, guest, hostMsgs, guestMsgs
}

func TestStreamCarriesBytesBothWaysWithHalfClose(t *testing.T) {
	host, guest, _, _ := pair(t)
	hs, err := host.Open()
	if err != nil {
		t.Fatal(err)
	}
	gs, err := guest.Accept(hs.ID())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB, many windows
	go func() {
		_, _ = hs.Write(data)
		_ = hs.CloseWrite()
	}()
	got, err := io.ReadAll(gs)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(data))
	}
	if _, err := gs.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	_ = gs.CloseWrite()
	back, err := io.ReadAll(hs)
	if err != nil || string(back) != "back" {
		t.Fatalf("back: %q %v", back, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for (host.Streams() > 0 || guest.Streams() > 0) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if host.Streams() != 0 || guest.Streams() != 0 {
		t.Errorf("streams left open after both sides closed: host %d guest %d", host.Streams(), guest.Streams())
	}
}

// TestAFloodingStreamStarvesNothing: a stream whose reader never reads
// fills its window and stops; other streams and control messages go on,
// and the receiver holds no more than the window for it.
func TestAFloodingStreamStarvesNothing(t *testing.T) {
	host, guest, hostMsgs, _ := pair(t)
	flood, _ := host.Open()
	other, _ := host.Open()
	gflood, err := guest.Accept(flood.ID())
	if err != nil {
		t.Fatal(err)
	}
	gother, err := guest.Accept(other.ID())
	if err != nil {
		t.Fatal(err)
	}
	// the guest floods; the host never reads the flood
	go func() { _, _ = gflood.Write(make([]byte, 64<<20)) }()
	time.Sleep(100 * time.Millisecond)
	flood.mu.Lock()
	buffered := len(flood.buf)
	flood.mu.Unlock()
	if buffered > Window {
		t.Fatalf("the host buffered %d bytes of one stream, over the window of %d", buffered, Window)
	}
	go func() { _, _ = gother.Write([]byte("still here")); _ = gother.CloseWrite() }()
	got, err := io.ReadAll(other)
	if err != nil || string(got) != "still here" {
		t.Fatalf("the other stream: %q %v", got, err)
	}
	if err := guest.Send([]byte(`{"op":"hello"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-hostMsgs:
		if string(m) != `{"op":"hello"}` {
			t.Fatalf("control message %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a control message did not pass a flooding stream")
	}
	// closing the flooded stream resets it; the writer stops with an error
	flood.Close()
}

// hostile writes raw frames to a host Conn and returns why it ended.
func hostile(t *testing.T, frames ...[]byte) error {
	t.Helper()
	a, b := net.Pipe()
	var accepted sync.WaitGroup
	var c *Conn
	c = NewConn(a, Host, func(m []byte) error {
		// a control message names guest stream 2, as egress does
		accepted.Add(1)
		defer accepted.Done()
		_, err := c.Accept(2)
		return err
	})
	defer c.Close()
	go func() {
		for _, f := range frames {
			if _, err := b.Write(f); err != nil {
				return
			}
		}
		// then read whatever the host sends, so that it never blocks
		_, _ = io.Copy(io.Discard, b)
	}()
	select {
	case <-c.Done():
		return c.Err()
	case <-time.After(5 * time.Second):
		b.Close()
		<-c.Done()
		return nil
	}
}

func frame(stream uint32, typ uint8, n int, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, stream)
	b = append(b, typ, byte(n>>16), byte(n>>8), byte(n))
	return append(b, payload...)
}

func TestHostileFramesEndTheConnection(t *testing.T) {
	open := frame(0, TypeControl, 2, []byte("{}"))
	for _, c := range []struct {
		name   string
		frames [][]byte
	}{
		{"unknown type", [][]byte{frame(1, 9, 0, nil)}},
		{"control message over the bound", [][]byte{frame(0, TypeControl, MaxControl+1, nil)}},
		{"data frame over the bound", [][]byte{frame(1, TypeData, MaxData+1, nil)}},
		{"control on a stream", [][]byte{frame(3, TypeControl, 2, []byte("{}"))}},
		{"data on stream 0", [][]byte{frame(0, TypeData, 1, []byte("x"))}},
		{"short window frame", [][]byte{frame(2, TypeWindow, 2, []byte{0, 1})}},
		{"data past the window", append([][]byte{open}, repeat(frame(2, TypeData, MaxData, make([]byte, MaxData)), Window/MaxData+1)...)},
		{"a window past the bound", [][]byte{open, frame(2, TypeWindow, 4, []byte{0, 0, 0, 1})}},
		{"data after close", [][]byte{open, frame(2, TypeClose, 0, nil), frame(2, TypeData, 1, []byte("x"))}},
		{"a stream opened twice", [][]byte{frame(0, TypeControl, 2, []byte("{}")), frame(0, TypeControl, 2, []byte("{}"))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := hostile(t, c.frames...)
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("connection ended with %v, want a protocol violation", err)
			}
		})
	}
}

func repeat(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestDataForAStreamNoLongerOpenIsDropped(t *testing.T) {
	err := hostile(t, frame(7, TypeData, 3, []byte("abc")), frame(9, TypeReset, 0, nil), frame(11, TypeWindow, 4, []byte{0, 0, 0, 1}))
	if err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("frames for unknown streams ended the connection: %v", err)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader and to a host
// connection: neither may panic, a frame read must be within its bounds,
// and the connection ends (or runs) without holding more than a frame.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(0, TypeControl, 2, []byte("{}")))
	f.Add(frame(1, TypeData, 3, []byte("abc")))
	f.Add(frame(1, TypeWindow, 4, []byte{0, 0, 1, 0}))
	f.Add(frame(0, TypeControl, 0xffffff, nil))
	f.Add(append(frame(0, TypeControl, 2, []byte("{}")), frame(2, TypeData, 1, []byte("x"))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			fr, err := ReadFrame(r)
			if err != nil {
				break
			}
			limit, ok := maxPayload(fr.Type)
			if !ok || len(fr.Payload) > limit || (fr.Type == TypeControl) != (fr.Stream == 0) {
				t.Fatalf("ReadFrame returned a frame out of bounds: %d %d %d", fr.Stream, fr.Type, len(fr.Payload))
			}
		}
		a, p := net.Pipe()
		var c *Conn
		c = NewConn(a, Host, func(m []byte) error {
			_, err := c.Accept(2)
			return err
		})
		go func() { _, _ = p.Write(b); p.Close() }()
		go func() { _, _ = io.Copy(io.Discard, p) }()
		select {
		case <-c.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the connection neither ended nor read its input")
		}
		c.Close()
	})
}
