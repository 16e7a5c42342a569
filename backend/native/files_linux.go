package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// files reaches a native sandbox's files through its init, which carries
// out each operation beneath /tmp, /workspace/output or /workspace/input
// (see package dirfs); data travels through a pipe.
type files struct{ i *instance }

var _ sandbox.Files = (*files)(nil)

// op sends one file operation with an optional data pipe end and returns
// init's answer.
func (f *files) op(ctx context.Context, op nsinit.FileOp, pipe *os.File) (*dirfs.Info, error) {
	// Init writes what is put, and the pages are charged to the cgroup it
	// is in: it must be in its own first, as for a process's start.
	select {
	case <-f.i.placed:
	case <-ctx.Done():
		if pipe != nil {
			pipe.Close()
		}
		return nil, ctx.Err()
	}
	var fds []*os.File
	if pipe != nil {
		fds = []*os.File{pipe}
	}
	r, err := f.i.request(ctx, nsinit.Message{Op: nsinit.OpFile, File: &op}, fds...)
	if pipe != nil {
		pipe.Close()
	}
	if err != nil {
		return nil, err
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	if r.FileError != nil {
		return nil, command.FileError(r.FileError)
	}
	return r.Info, nil
}

// Put writes r to path through a pipe that init reads.
func (f *files) Put(ctx context.Context, path string, r io.Reader, max int64) (sandbox.FileInfo, error) {
	lim := f.i.policy.Limits
	cap := lim.DiskBytes
	if path == nsinit.InputDir || strings.HasPrefix(path, nsinit.InputDir+"/") {
		cap = lim.InputBytes
	}
	if max <= 0 || max > cap {
		max = cap
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(pw, command.ContextReader(ctx, r))
		pw.Close()
	}()
	inf, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FilePut, Path: path, Max: max}, pr)
	pw.Close() // init stopped reading: unblock the copy
	<-copied
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return fileInfo(inf), nil
}

// Get opens path: init copies the file into a pipe.
func (f *files) Get(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	inf, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FileGet, Path: path}, pw)
	if err != nil {
		pr.Close()
		return nil, sandbox.FileInfo{}, err
	}
	return pr, fileInfo(inf), nil
}

// Stat describes path.
func (f *files) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	inf, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FileStat, Path: path}, nil)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return fileInfo(inf), nil
}

// List describes a folder's entries; init writes them into a pipe, read
// while the request is answered so that a long listing cannot block.
func (f *files) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	type listing struct {
		infos []dirfs.Info
		err   error
	}
	got := make(chan listing, 1)
	go func() {
		var l listing
		l.err = json.NewDecoder(io.LimitReader(pr, 256<<20)).Decode(&l.infos)
		got <- l
	}()
	if _, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FileList, Path: path}, pw); err != nil {
		return nil, err
	}
	l := <-got
	if l.err != nil {
		return nil, fmt.Errorf("listing %s: %w", path, l.err)
	}
	out := make([]sandbox.FileInfo, len(l.infos))
	for k := range l.infos {
		out[k] = fileInfo(&l.infos[k])
	}
	return out, nil
}

// Mkdir makes a folder and its parents.
func (f *files) Mkdir(ctx context.Context, path string) error {
	_, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FileMkdir, Path: path}, nil)
	return err
}

// Remove removes a file or a folder tree.
func (f *files) Remove(ctx context.Context, path string) error {
	_, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FileRemove, Path: path}, nil)
	return err
}

// Rename moves a file or folder within one top folder.
func (f *files) Rename(ctx context.Context, from, to string) error {
	_, err := f.op(ctx, nsinit.FileOp{Op: nsinit.FileRename, Path: from, To: to}, nil)
	return err
}

func fileInfo(i *dirfs.Info) sandbox.FileInfo {
	if i == nil {
		return sandbox.FileInfo{}
	}
	return sandbox.FileInfo{Path: i.Path, Name: i.Name, Size: i.Size, Mode: fs.FileMode(i.Mode), ModTime: i.ModTime, Target: i.Target}
}
