package artifact

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// dstResolve is how paths beneath the host folder are resolved: no link
// that someone planted there is followed and nothing lands above it.
const dstResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// dest writes artifacts beneath a host folder.
type dest struct {
	dirs map[string]int // open folders by relative path; "" is the root
	// named makes files start under a hidden temporary name, where the
	// file system has no O_TMPFILE.
	named bool
}

// openDest creates the host folder if needed and opens it.
func openDest(dst string) (*dest, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, fmt.Errorf("create output folder: %w", err)
	}
	fd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open output folder %s: %w", dst, err)
	}
	return &dest{dirs: map[string]int{"": fd}}, nil
}

// close closes every folder it opened.
func (d *dest) close() {
	for _, fd := range d.dirs {
		unix.Close(fd)
	}
}

// dir returns the descriptor of a folder beneath the root, creating the
// folders on the way; a symbolic link on the way is an error, not followed.
func (d *dest) dir(rel string) (int, error) {
	if rel == "." {
		rel = ""
	}
	if fd, ok := d.dirs[rel]; ok {
		return fd, nil
	}
	parent, err := d.dir(path.Dir(rel))
	if err != nil {
		return -1, err
	}
	name := path.Base(rel)
	if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("create folder %s in the output folder: %w", rel, err)
	}
	fd, err := openat2(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, dstResolve)
	if err != nil {
		return -1, fmt.Errorf("open folder %s in the output folder (a link there is not followed): %w", rel, err)
	}
	d.dirs[rel] = fd
	return fd, nil
}

// staged is a file being written, not yet visible under its name.
type staged struct {
	f     *os.File
	dirfd int
	name  string
	tmp   string // its temporary name, when it has one
}

// create starts the file rel: an unnamed O_TMPFILE in its folder, or, where
// the file system lacks those, a new hidden file created with O_EXCL.
// Either way no existing file or link is opened.
func (d *dest) create(rel string) (*staged, error) {
	dirfd, err := d.dir(path.Dir(rel))
	if err != nil {
		return nil, err
	}
	s := &staged{dirfd: dirfd, name: path.Base(rel)}
	if !d.named {
		fd, err := unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err == nil {
			s.f = os.NewFile(uintptr(fd), rel)
			return s, nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("create %s: %w", rel, err)
		}
		d.named = true
	}
	s.tmp = tempName()
	fd, err := openat2(dirfd, s.tmp, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW, 0o644, dstResolve)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", rel, err)
	}
	s.f = os.NewFile(uintptr(fd), rel)
	return s, nil
}

// commit gives the file its name, replacing (never following) whatever
// had that name: a file from an earlier run or a planted link.
func (s *staged) commit() error {
	defer s.f.Close()
	if s.tmp == "" {
		s.tmp = tempName()
		if err := linkTmpfile(s.f, s.dirfd, s.tmp); err != nil {
			return fmt.Errorf("link %s: %w", s.name, err)
		}
	}
	if err := unix.Renameat(s.dirfd, s.tmp, s.dirfd, s.name); err != nil {
		unix.Unlinkat(s.dirfd, s.tmp, 0)
		return fmt.Errorf("rename %s into place: %w", s.name, err)
	}
	return nil
}

// abort drops the file: an O_TMPFILE vanishes when closed, a named one is
// removed.
func (s *staged) abort() {
	s.f.Close()
	if s.tmp != "" {
		unix.Unlinkat(s.dirfd, s.tmp, 0)
	}
}

// linkTmpfile gives an O_TMPFILE a name: with AT_EMPTY_PATH where the
// process may (CAP_DAC_READ_SEARCH), else through its /proc/self/fd link.
func linkTmpfile(f *os.File, dirfd int, name string) error {
	fd := int(f.Fd())
	err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
	if err == nil {
		return nil
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
}

// tempName returns a fresh hidden name for a file being written.
func tempName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return ".airlock-" + hex.EncodeToString(b) + ".partial"
}
