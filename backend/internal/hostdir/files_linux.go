package hostdir

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Files reaches the sandbox's files from the host, beneath its folders
// (package dirfs: no link followed, no mount crossed): what it creates is
// owned by the sandbox user as the host sees it, and what it puts under
// /workspace/input is read-only to the code.
func (d *Dir) Files() sandbox.Files { return files{d} }

type files struct{ d *Dir }

var _ sandbox.Files = files{}

// with runs op on the folder's FS unless the folder was removed.
func (f files) with(op func(fs *dirfs.FS) error) error {
	f.d.mu.RLock()
	defer f.d.mu.RUnlock()
	if f.d.removed {
		return errRemoved
	}
	return fileError(op(f.d.fs))
}

// fileError maps dirfs's error kinds to the sandbox's sentinels.
func fileError(err error) error {
	var e *dirfs.Error
	if !errors.As(err, &e) {
		return err
	}
	return command.FileError(e)
}

// Put writes r to path; max 0 (or above it) means the folder's cap: the
// disk cap, or the input cap under /workspace/input.
func (f files) Put(ctx context.Context, path string, r io.Reader, max int64) (sandbox.FileInfo, error) {
	cap := f.d.opts.DiskBytes
	if path == InputTarget || strings.HasPrefix(path, InputTarget+"/") {
		cap = f.d.opts.InputBytes
	}
	if max <= 0 || (cap > 0 && max > cap) {
		max = cap
	}
	var inf dirfs.Info
	err := f.with(func(fs *dirfs.FS) (err error) {
		inf, err = fs.Put(path, contextReader{ctx, r}, max)
		return err
	})
	return fileInfo(inf), err
}

// Get opens path for reading.
func (f files) Get(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	var rc io.ReadCloser
	var inf dirfs.Info
	err := f.with(func(fs *dirfs.FS) error {
		file, i, err := fs.Open(path)
		if err == nil {
			rc, inf = file, i
		}
		return err
	})
	return rc, fileInfo(inf), err
}

// Stat describes path without following a link.
func (f files) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	var inf dirfs.Info
	err := f.with(func(fs *dirfs.FS) (err error) {
		inf, err = fs.Stat(path)
		return err
	})
	return fileInfo(inf), err
}

// List describes a folder's entries, sorted by name.
func (f files) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	var infos []dirfs.Info
	err := f.with(func(fs *dirfs.FS) (err error) {
		infos, err = fs.List(path)
		return err
	})
	out := make([]sandbox.FileInfo, len(infos))
	for k := range infos {
		out[k] = fileInfo(infos[k])
	}
	return out, err
}

// Mkdir makes a folder and its parents.
func (f files) Mkdir(ctx context.Context, path string) error {
	return f.with(func(fs *dirfs.FS) error { return fs.Mkdir(path) })
}

// Remove removes a file or a folder tree.
func (f files) Remove(ctx context.Context, path string) error {
	return f.with(func(fs *dirfs.FS) error { return fs.Remove(path) })
}

// Rename moves a file or folder within one top folder.
func (f files) Rename(ctx context.Context, from, to string) error {
	return f.with(func(fs *dirfs.FS) error { return fs.Rename(from, to) })
}

func fileInfo(i dirfs.Info) sandbox.FileInfo {
	return sandbox.FileInfo{Path: i.Path, Name: i.Name, Size: i.Size, Mode: fs.FileMode(i.Mode), ModTime: i.ModTime, Target: i.Target}
}

// contextReader stops a copy when its context ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
