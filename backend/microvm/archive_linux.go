package microvm

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"

	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// ArchiveOutput hands out /workspace/output as a tar stream for the
// artifact filter (artifact.CollectTar). The host builds the stream from
// the guest's walk of the folder (wire.FileWalk) and opens each regular
// file as it comes (wire.FileOpenOutput), so that the header of a file
// carries the size of the very file its bytes come from. The stream is
// also an io.Seeker for skipping forward: the tar reader seeks past a
// body it does not read (a file over the filter's cap), and the host then
// stops the file's stream instead of moving the whole file out of the
// machine. Folders, regular files, symbolic links, FIFOs and devices
// appear as such; a regular file with more than one link, and a socket,
// which tar has no type for, are told by the PAX records of
// sandbox.PAXLinks and sandbox.PAXType, as the host backends' streams
// tell them, so that the filter refuses them by name. A hard link's
// header carries no bytes (size 0): the filter refuses it unread, and
// the guest opens no file of more than one link.
func (i *instance) ArchiveOutput(ctx context.Context) (io.ReadCloser, error) {
	f := &files{i}
	_, st, err := f.op(ctx, wire.FileOp{Op: wire.FileWalk}, true)
	if err != nil {
		return nil, err
	}
	return &archive{ctx: ctx, f: f, walk: st, dec: json.NewDecoder(io.LimitReader(st, maxListing))}, nil
}

// archive is the tar stream of ArchiveOutput.
type archive struct {
	ctx  context.Context
	f    *files
	walk *wire.Stream
	dec  *json.Decoder

	pending []byte       // header, padding or trailer bytes due next
	body    *wire.Stream // the current file's bytes; nil once cut or done
	left    int64        // body bytes still due; zeros once body is nil
	pad     int          // padding after the body
	pos     int64
	ended   bool
	err     error
}

var _ io.ReadSeeker = (*archive)(nil)

func (a *archive) Read(p []byte) (int, error) {
	for {
		switch {
		case a.err != nil:
			return 0, a.err
		case len(a.pending) > 0:
			n := copy(p, a.pending)
			a.pending = a.pending[n:]
			a.pos += int64(n)
			return n, nil
		case a.left > 0:
			return a.readBody(p)
		case a.ended:
			return 0, io.EOF
		}
		a.err = a.next()
	}
}

// readBody reads the current body; a file that shrank since it was
// opened is padded with zeros to the size its header gave.
func (a *archive) readBody(p []byte) (int, error) {
	want := int(min(int64(len(p)), a.left))
	n := 0
	if a.body != nil {
		var err error
		n, err = a.body.Read(p[:want])
		if err != nil {
			if !errors.Is(err, io.EOF) {
				a.err = fmt.Errorf("output file: %w", err)
				return n, a.err
			}
			a.cutBody()
		}
	} else {
		clear(p[:want])
		n = want
	}
	a.left -= int64(n)
	a.pos += int64(n)
	if a.left == 0 {
		a.cutBody()
		a.pending = make([]byte, a.pad)
	}
	return n, nil
}

func (a *archive) cutBody() {
	if a.body != nil {
		a.body.Close()
		a.body = nil
	}
}

// Seek skips forward within the current body (whence io.SeekCurrent);
// what is skipped is never sent by the guest.
func (a *archive) Seek(off int64, whence int) (int64, error) {
	if whence != io.SeekCurrent || off < 0 || off > a.left {
		return a.pos, fmt.Errorf("output archive: can only skip forward within a file: %w", sandbox.ErrInvalid)
	}
	if off > 0 {
		a.cutBody()
		a.left -= off
		a.pos += off
		if a.left == 0 {
			a.pending = make([]byte, a.pad)
		}
	}
	return a.pos, nil
}

// next reads the next entry of the walk and queues its header, or the
// trailer at the end.
func (a *archive) next() error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	var e wire.WalkEntry
	if err := a.dec.Decode(&e); err != nil {
		if errors.Is(err, io.EOF) {
			a.ended = true
			a.pending = make([]byte, 2*512)
			return nil
		}
		return fmt.Errorf("output walk: %w", err)
	}
	name := string(e.Path)
	h := &tar.Header{Name: name, Mode: int64(e.Mode.Perm()), ModTime: e.ModTime, Format: tar.FormatPAX}
	switch {
	case e.Mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case e.Mode&fs.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
	case e.Mode&fs.ModeNamedPipe != 0:
		h.Typeflag = tar.TypeFifo
	case e.Mode&fs.ModeCharDevice != 0:
		h.Typeflag = tar.TypeChar
	case e.Mode&fs.ModeDevice != 0:
		h.Typeflag = tar.TypeBlock
	case e.Mode&fs.ModeSocket != 0:
		h.Typeflag, h.PAXRecords = tar.TypeFifo, map[string]string{sandbox.PAXType: "socket"}
	case e.Links > 1:
		h.Typeflag, h.PAXRecords = tar.TypeReg, map[string]string{sandbox.PAXLinks: strconv.FormatUint(e.Links, 10)}
	default:
		r, st, err := a.f.op(a.ctx, wire.FileOp{Op: wire.FileOpenOutput, RawPath: e.Path}, true)
		if err != nil {
			if errors.Is(err, sandbox.ErrInvalid) || errors.Is(err, sandbox.ErrNotFound) {
				return nil // changed or gone since the walk saw it: left out
			}
			return err
		}
		inf := info(r)
		if inf.Size < 0 {
			st.Close()
			return fmt.Errorf("output %q: size %d: %w", name, inf.Size, wire.ErrProtocol)
		}
		h.Typeflag, h.Size, h.ModTime = tar.TypeReg, inf.Size, inf.ModTime
		a.body, a.left, a.pad = st, inf.Size, int((512-inf.Size%512)%512)
		if inf.Size == 0 {
			a.cutBody()
		}
	}
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).WriteHeader(h); err != nil {
		a.cutBody()
		return fmt.Errorf("output %q: %w", name, err)
	}
	a.pending = buf.Bytes()
	return nil
}

// Close ends the walk and the current file's stream.
func (a *archive) Close() error {
	a.cutBody()
	a.walk.Close()
	if a.err == nil {
		a.err = errors.New("output archive: closed")
	}
	return nil
}
