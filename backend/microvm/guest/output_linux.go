package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// The output folder is handed to the host entry by entry: FileWalk lists
// it, FileOpenOutput opens one regular file of it, so that the host can
// build the tar stream the artifact filter reads and skip, unread, what
// the filter refuses by its header (a file over its cap). Every path is
// resolved beneath the folder's descriptor without following links or
// crossing mounts, as the filter does on a host folder.

// Bounds of one walk.
const (
	maxWalkDepth   = 256
	maxWalkEntries = 1 << 20
)

func (s *server) output(m wire.Msg, inst sandbox.Instance, st *wire.Stream) {
	o, ok := inst.(sandbox.OutputDirOpener)
	if !ok {
		s.reply(m, fmt.Errorf("the guest sandbox has no output folder: %w", sandbox.ErrUnsupported))
		return
	}
	dir, err := o.OpenOutputDir(context.Background())
	if err != nil {
		s.reply(m, err)
		return
	}
	defer dir.Close()
	if m.File.Op == wire.FileWalk {
		// The reply comes first: the host reads the walk as it comes. A
		// walk that fails resets the stream, which the host reads as an
		// error.
		s.reply(m, nil)
		enc := json.NewEncoder(st)
		n := 0
		err := walk(int(dir.Fd()), "", 0, func(e wire.WalkEntry) error {
			if n++; n > maxWalkEntries {
				return fmt.Errorf("more than %d entries: %w", maxWalkEntries, sandbox.ErrLimit)
			}
			return enc.Encode(e)
		})
		if err == nil {
			_ = st.CloseWrite()
		}
		return
	}
	f, info, err := openOutput(int(dir.Fd()), string(m.File.RawPath))
	s.replyInfo(m, info, err)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := io.Copy(st, io.LimitReader(f, info.Size)); err == nil {
		_ = st.CloseWrite()
	}
}

// walk lists the entries of folder dir (rel beneath the output folder),
// each folder before what it holds, names in byte order.
func walk(dir int, rel string, depth int, emit func(wire.WalkEntry) error) error {
	if depth > maxWalkDepth {
		return nil // deeper than any cap of the filter: left out
	}
	// a fresh open of the folder: a duplicate would share its reading
	// position with the descriptor it came from, which a walk before
	// this one left at the end
	fresh, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fresh), rel)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		p := path.Join(rel, name)
		e := entry(p, &st)
		if e.Mode&fs.ModeSymlink != 0 {
			buf := make([]byte, 4096)
			if n, err := unix.Readlinkat(dir, name, buf); err == nil {
				e.Target = string(buf[:n])
			}
		}
		if err := emit(e); err != nil {
			return err
		}
		if !e.Mode.IsDir() {
			continue
		}
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: dirfs.Resolve})
		if err != nil {
			continue // swapped for something else meanwhile
		}
		err = walk(fd, p, depth+1, emit)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// openOutput opens the regular file rel of the output folder for reading.
func openOutput(dir int, rel string) (*os.File, sandbox.FileInfo, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || strings.HasPrefix(rel, "../") || rel == ".." {
		return nil, sandbox.FileInfo{}, fmt.Errorf("output path %q: %w", rel, sandbox.ErrInvalid)
	}
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: dirfs.Resolve})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, sandbox.FileInfo{}, fmt.Errorf("output %s: %w", rel, sandbox.ErrNotFound)
		}
		return nil, sandbox.FileInfo{}, fmt.Errorf("output %s: %v: %w", rel, err, sandbox.ErrInvalid)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		unix.Close(fd)
		return nil, sandbox.FileInfo{}, fmt.Errorf("output %s: no longer a regular file with one link: %w", rel, sandbox.ErrInvalid)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, sandbox.FileInfo{}, err
	}
	e := entry(rel, &st)
	return os.NewFile(uintptr(fd), rel), sandbox.FileInfo{Path: rel, Name: path.Base(rel), Size: e.Size, Mode: e.Mode, ModTime: e.ModTime}, nil
}

func entry(rel string, st *unix.Stat_t) wire.WalkEntry {
	return wire.WalkEntry{Path: []byte(rel), Mode: dirfs.ModeOf(st.Mode) &^ (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), Size: st.Size,
		Links: uint64(st.Nlink), ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
}
