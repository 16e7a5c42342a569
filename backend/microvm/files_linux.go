package microvm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// files reaches a microvm sandbox's files through the guest agent, which
// carries out each operation with the native sandbox's files inside; data
// travels on a stream of its own.
type files struct{ i *instance }

var _ sandbox.Files = (*files)(nil)

// maxListing bounds the JSON of one listing or walk the host reads.
const maxListing = 256 << 20

// op sends one file operation, with a fresh stream when stream is set,
// and returns the guest's reply; the caller closes the stream.
func (f *files) op(ctx context.Context, op wire.FileOp, stream bool) (wire.Msg, *wire.Stream, error) {
	var st *wire.Stream
	if stream {
		var err error
		if st, err = f.i.conn.Open(); err != nil {
			return wire.Msg{}, nil, f.i.goneOr(err)
		}
		op.Stream = st.ID()
	}
	r, err := f.i.call(ctx, wire.Msg{Op: wire.OpFile, File: &op})
	if err != nil && st != nil {
		st.Close()
		st = nil
	}
	return r, st, err
}

// Put sends r to the guest, which writes it to path.
func (f *files) Put(ctx context.Context, path string, r io.Reader, max int64) (sandbox.FileInfo, error) {
	st, err := f.i.conn.Open()
	if err != nil {
		return sandbox.FileInfo{}, f.i.goneOr(err)
	}
	defer st.Close()
	// the request goes first: the guest drops data for a stream it has
	// not heard of
	p, err := f.i.send(wire.Msg{Op: wire.OpFile, File: &wire.FileOp{Op: wire.FilePut, Path: path, Max: max, Stream: st.ID()}})
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if _, err := io.Copy(st, command.ContextReader(ctx, r)); err == nil {
			_ = st.CloseWrite()
		}
	}()
	rep, err := p.wait(ctx)
	if err == nil && rep.Error != "" {
		err = wire.Errorf(rep.Error, rep.Kind)
	}
	st.Close() // the guest stopped reading: unblock the copy
	<-copied
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return info(rep), nil
}

func info(r wire.Msg) sandbox.FileInfo {
	if r.Info == nil {
		return sandbox.FileInfo{}
	}
	return *r.Info
}

// Get opens path: the guest sends the file on a stream.
func (f *files) Get(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	r, st, err := f.op(ctx, wire.FileOp{Op: wire.FileGet, Path: path}, true)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	return st, info(r), nil
}

// Stat describes path.
func (f *files) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	r, _, err := f.op(ctx, wire.FileOp{Op: wire.FileStat, Path: path}, false)
	return info(r), err
}

// List describes a folder's entries, which the guest sends as JSON on a
// stream before it replies.
func (f *files) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	st, err := f.i.conn.Open()
	if err != nil {
		return nil, f.i.goneOr(err)
	}
	defer st.Close()
	type listing struct {
		infos []sandbox.FileInfo
		err   error
	}
	got := make(chan listing, 1)
	go func() {
		var l listing
		l.err = json.NewDecoder(io.LimitReader(st, maxListing)).Decode(&l.infos)
		got <- l
	}()
	if _, err := f.i.call(ctx, wire.Msg{Op: wire.OpFile, File: &wire.FileOp{Op: wire.FileList, Path: path, Stream: st.ID()}}); err != nil {
		return nil, err
	}
	l := <-got
	if l.err != nil {
		return nil, fmt.Errorf("listing %s: %w", path, l.err)
	}
	return l.infos, nil
}

// Mkdir makes a folder and its parents.
func (f *files) Mkdir(ctx context.Context, path string) error {
	_, _, err := f.op(ctx, wire.FileOp{Op: wire.FileMkdir, Path: path}, false)
	return err
}

// Remove removes a file or a folder tree.
func (f *files) Remove(ctx context.Context, path string) error {
	_, _, err := f.op(ctx, wire.FileOp{Op: wire.FileRemove, Path: path}, false)
	return err
}

// Rename moves a file or folder within one top folder.
func (f *files) Rename(ctx context.Context, from, to string) error {
	_, _, err := f.op(ctx, wire.FileOp{Op: wire.FileRename, Path: from, To: to}, false)
	return err
}

// streamConn is an egress stream as a net.Conn for the proxy.
type streamConn struct{ *wire.Stream }

var _ net.Conn = streamConn{}

func (streamConn) LocalAddr() net.Addr  { return egressAddr{} }
func (streamConn) RemoteAddr() net.Addr { return egressAddr{} }

func (c streamConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// egressAddr is the address of both ends of an egress stream.
type egressAddr struct{}

func (egressAddr) Network() string { return "microvm" }
func (egressAddr) String() string  { return sandbox.EgressAddr }

// egressListener hands out the egress connections the guest opens.
type egressListener struct {
	i      *instance
	once   sync.Once
	closed chan struct{}
}

func (l *egressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.i.egressQ:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.i.done:
		return nil, net.ErrClosed
	}
}

func (l *egressListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *egressListener) Addr() net.Addr { return egressAddr{} }
