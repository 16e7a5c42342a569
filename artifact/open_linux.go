package artifact

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// srcResolve is how every path beneath the output folder is resolved: no
// symbolic link anywhere, no /proc magic link, no escape above the folder,
// no crossing into another mount.
const srcResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openRetries bounds the retries of openat2 when the kernel reports a
// concurrent rename (EAGAIN) or a signal (EINTR).
const openRetries = 16

// openat2 opens name beneath dirfd with the given flags and resolve mode.
func openat2(dirfd int, name string, flags uint64, mode uint64, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve}
	for range openRetries {
		fd, err := unix.Openat2(dirfd, name, how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// hostErrno are errors of the host, not of the entry: they end Collect.
var hostErrno = []error{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.ENOSYS}

// openReason words an openat2 failure on an entry as a verdict reason, or
// returns it as an error when the host is at fault.
func openReason(err error) (string, error) {
	for _, h := range hostErrno {
		if errors.Is(err, h) {
			return "", fmt.Errorf("open beneath the output folder: %w", err)
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return "symbolic link (not followed)", nil
	case errors.Is(err, unix.EXDEV):
		return "mount point or path into another file system", nil
	case errors.Is(err, unix.ENOENT):
		return "vanished while the folder was read", nil
	case errors.Is(err, unix.ENOTDIR):
		return "changed type while the folder was read", nil
	case errors.Is(err, unix.EAGAIN):
		return "kept changing while the folder was read", nil
	}
	return "cannot be opened: " + err.Error(), nil
}

// inspect stats name beneath dirfd through an O_PATH descriptor, which
// opens nothing for reading: a FIFO cannot block and a device cannot react.
// It returns the stat, or a reason to refuse the entry.
func inspect(dirfd int, name string) (unix.Stat_t, string, error) {
	var st unix.Stat_t
	fd, err := openat2(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW, 0, srcResolve)
	if err != nil {
		why, herr := openReason(err)
		return st, why, herr
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, "", fmt.Errorf("fstat: %w", err)
	}
	return st, typeReason(&st), nil
}

// typeReason refuses every entry but folders and regular files with a
// single link. A hard link may be a second name of a file that the
// sandbox must not hand out, so a file with more than one link is refused
// under all its names.
func typeReason(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return ""
	case unix.S_IFREG:
		if st.Nlink != 1 {
			return fmt.Sprintf("hard link (%d names for one file)", st.Nlink)
		}
		return ""
	case unix.S_IFLNK:
		return "symbolic link (not followed)"
	case unix.S_IFIFO:
		return "FIFO (named pipe)"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device node"
	}
	return "file of unknown type"
}

// sameFile reports whether two stats are of one inode of the same type.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode&unix.S_IFMT == b.Mode&unix.S_IFMT
}

// reopen opens an inspected entry for reading (a folder with
// O_DIRECTORY) and checks that the descriptor is the inode that inspect
// saw, still of its type, still with one link: the entry may have been
// swapped in between. O_NONBLOCK and O_NOCTTY make sure that a FIFO or a
// terminal swapped in cannot block or take over.
func reopen(dirfd int, name string, want *unix.Stat_t) (*os.File, string, error) {
	flags := uint64(unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY)
	if want.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags |= unix.O_DIRECTORY
	}
	fd, err := openat2(dirfd, name, flags, 0, srcResolve)
	if err != nil {
		why, herr := openReason(err)
		return nil, why, herr
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("fstat: %w", err)
	}
	if !sameFile(&st, want) {
		unix.Close(fd)
		return nil, "replaced by another file while it was read", nil
	}
	if why := typeReason(&st); why != "" {
		unix.Close(fd)
		return nil, why, nil
	}
	return os.NewFile(uintptr(fd), name), "", nil
}

// CheckFile runs one file of an output folder through the rules of
// Collect, for a server that hands out a single file: rel (slash-separated)
// is opened beneath root the way Collect opens entries, without following
// a link and without opening anything but a regular file with one link,
// and its content goes through Check. out is as for Check.
func CheckFile(ctx context.Context, root *os.File, rel string, out Output, p sandbox.ArtifactPolicy) (sandbox.Artifact, error) {
	c := newChecker(Normalize(p))
	a := sandbox.Artifact{Path: displayPath(rel)}
	if why := c.checkRel(rel); why != "" {
		return reject(a, why), nil
	}
	dirfd, err := openRoot(root)
	if err != nil {
		return a, err
	}
	defer unix.Close(dirfd)
	st, why, err := inspect(dirfd, rel)
	if err != nil || why != "" {
		a.Size = st.Size
		return reject(a, why), err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return reject(a, "a folder, not a file"), nil
	}
	f, why, err := reopen(dirfd, rel, &st)
	if err != nil || why != "" {
		a.Size = st.Size
		return reject(a, why), err
	}
	defer f.Close()
	return c.check(ctx, rel, f, st.Size, c.p.MaxFileBytes, out)
}
