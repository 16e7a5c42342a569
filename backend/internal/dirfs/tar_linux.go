package dirfs

import (
	"archive/tar"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// maxTarDepth is how deep Tar descends; a folder below it is written
// without its entries (the artifact filter refuses such depths anyway).
const maxTarDepth = 64

// Tar writes folder p and everything beneath it to w as a tar stream,
// names relative to p, following no link: folders and regular files as
// they are, links with their targets, and FIFOs, sockets and devices as
// headers without data, so that a reader sees every entry and judges it.
// A regular file's data is what it held when opened, cut or padded with
// zeros to the size its header gives, if it changes meanwhile.
func (fs *FS) Tar(p string, w io.Writer) error {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return err
	}
	fd, err := openBeneath(int(r.Dir.Fd()), rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return wrap(err, p)
	}
	tw := tar.NewWriter(w)
	err = tarDir(tw, fd, "", 0)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return tw.Close()
}

// tarDir writes the entries of folder dir, named under prefix.
func tarDir(tw *tar.Writer, dir int, prefix string, depth int) error {
	dup, err := unix.Dup(dir) // the os.File closes its own descriptor
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), prefix)
	names, err := d.Readdirnames(maxEntries)
	d.Close()
	if err != nil && err != io.EOF {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		name := path.Join(prefix, n)
		var st unix.Stat_t
		if err := unix.Fstatat(dir, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		h := &tar.Header{Name: name, Mode: int64(st.Mode & 0o7777), ModTime: time.Unix(st.Mtim.Sec, 0),
			Uid: int(st.Uid), Gid: int(st.Gid), Format: tar.FormatPAX}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if depth+1 >= maxTarDepth {
				continue
			}
			sub, err := openBeneath(dir, n, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				continue
			}
			err = tarDir(tw, sub, name, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if st.Nlink != 1 {
				h.PAXRecords = map[string]string{sandbox.PAXLinks: strconv.FormatUint(uint64(st.Nlink), 10)}
			}
			if err := tarFile(tw, dir, n, h); err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, 4096)
			k, err := unix.Readlinkat(dir, n, buf)
			if err != nil {
				continue
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, string(buf[:k])
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		default:
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFIFO:
				h.Typeflag = tar.TypeFifo
			case unix.S_IFCHR:
				h.Typeflag = tar.TypeChar
			case unix.S_IFBLK:
				h.Typeflag = tar.TypeBlock
			default: // a socket has no tar type: a FIFO's header stands for it
				h.Typeflag = tar.TypeFifo
				h.PAXRecords = map[string]string{sandbox.PAXType: "socket"}
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// tarFile writes one regular file: opened without following a link and
// without blocking, checked to be the regular file that was listed.
func tarFile(tw *tar.Writer, dir int, name string, h *tar.Header) error {
	fd, err := openBeneath(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil // changed meanwhile: it is not in the stream
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyN(tw, f, st.Size)
	if err != nil && err != io.EOF {
		return err
	}
	if n < st.Size {
		_, err = io.CopyN(tw, zeroReader{}, st.Size-n)
	}
	return err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
