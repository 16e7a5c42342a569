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

// Reasons of an artifact that was accepted but could not take its name.
const (
	reasonExists = "not written: the output folder already has an entry of this name, which is kept (--overwrite replaces it)"
	reasonFolder = "not written: the output folder has a folder of this name"
)

// dest writes artifacts beneath a host folder.
type dest struct {
	dirs map[string]int // open folders by relative path; "" is the root
	// named makes files start under a hidden temporary name, where the
	// file system has no O_TMPFILE.
	named bool
	// overwrite lets a file replace an entry of its name.
	overwrite bool
}

// openDest creates the host folder if needed and opens it. overwrite is
// Destination.Overwrite.
func openDest(dst string, overwrite bool) (*dest, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, fmt.Errorf("create output folder: %w", err)
	}
	fd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open output folder %s: %w", dst, err)
	}
	return &dest{dirs: map[string]int{"": fd}, overwrite: overwrite}, nil
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
	// overwrite lets commit replace an entry of the same name.
	overwrite bool
}

// create starts the file rel: an unnamed O_TMPFILE in its folder, or, where
// the file system lacks those, a new hidden file created with O_EXCL.
// Either way no existing file or link is opened.
func (d *dest) create(rel string) (*staged, error) {
	dirfd, err := d.dir(path.Dir(rel))
	if err != nil {
		return nil, err
	}
	s := &staged{dirfd: dirfd, name: path.Base(rel), overwrite: d.overwrite}
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

// commit gives the file its name. Without overwrite an entry that has the
// name already (a file from an earlier run, a planted link) is kept, and
// commit returns why the file was not placed; the check and the placing
// are one step (linkat and RENAME_NOREPLACE fail on an existing name), so
// nothing that appears in between is replaced. With overwrite such an
// entry is replaced, never followed; only a folder stays.
func (s *staged) commit() (string, error) {
	defer s.f.Close()
	if s.tmp == "" && !s.overwrite {
		return placed(linkTmpfile(s.f, s.dirfd, s.name), s.name)
	}
	if s.tmp == "" {
		s.tmp = tempName()
		if err := linkTmpfile(s.f, s.dirfd, s.tmp); err != nil {
			return "", fmt.Errorf("link %s: %w", s.name, err)
		}
	}
	why, err := placed(s.rename(), s.name)
	if why != "" || err != nil {
		unix.Unlinkat(s.dirfd, s.tmp, 0)
	}
	return why, err
}

// rename moves the temporary name onto the file's name: replacing what is
// there with overwrite, else only where nothing is. A file system without
// RENAME_NOREPLACE gets a hard link and an unlink, which refuse an
// existing name as well.
func (s *staged) rename() error {
	if s.overwrite {
		return unix.Renameat(s.dirfd, s.tmp, s.dirfd, s.name)
	}
	err := unix.Renameat2(s.dirfd, s.tmp, s.dirfd, s.name, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if err := unix.Linkat(s.dirfd, s.tmp, s.dirfd, s.name, 0); err != nil {
		return err
	}
	unix.Unlinkat(s.dirfd, s.tmp, 0)
	return nil
}

// placed turns the outcome of giving a file its name into a reason (the
// name is taken) or an error (the host failed).
func placed(err error, name string) (string, error) {
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, unix.EEXIST):
		return reasonExists, nil
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTEMPTY):
		return reasonFolder, nil
	}
	return "", fmt.Errorf("put %s into place: %w", name, err)
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
// linkat never replaces nor follows an entry at the new name: it fails
// with EEXIST.
func linkTmpfile(f *os.File, dirfd int, name string) error {
	fd := int(f.Fd())
	err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
	if err == nil || errors.Is(err, unix.EEXIST) {
		return err
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
}

// tempName returns a fresh hidden name for a file being written.
func tempName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return ".airlock-" + hex.EncodeToString(b) + ".partial"
}
