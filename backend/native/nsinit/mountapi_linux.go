package nsinit

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Thin wrappers over the kernel's mount API (open_tree, mount_setattr,
// move_mount, fsopen/fsmount), which builds each mount detached, sets its
// flags, and only then attaches it: no mount is ever visible half-made.

// cloneMount makes a detached copy of the mount tree at path (dirfd-relative
// when dirfd is not AT_FDCWD; path "" means dirfd itself).
func cloneMount(dirfd int, path string, recursive bool) (int, error) {
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, path, uint(flags))
	if err != nil {
		return -1, fmt.Errorf("clone mount %s: %w", path, err)
	}
	return fd, nil
}

// detachedTree clones paths beneath a detached mount. Kernels before
// 6.15 refuse to clone from a mount that is not attached (EINVAL): there
// the mount is attached, at the first clone, at the empty folder stage,
// and detached again by done; its descriptor still reaches it after.
type detachedTree struct {
	fd     int
	stage  string
	staged bool
}

// clone makes a detached copy of path beneath the tree ("" for its top).
func (d *detachedTree) clone(path string) (int, error) {
	if !d.staged {
		nfd, err := cloneMount(d.fd, path, false)
		if err == nil || !errors.Is(err, unix.EINVAL) {
			return nfd, err
		}
		if err := os.Mkdir(d.stage, 0o700); err != nil {
			return -1, err
		}
		if err := unix.MoveMount(d.fd, "", unix.AT_FDCWD, d.stage, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			os.Remove(d.stage)
			return -1, fmt.Errorf("stage mount at %s: %w", d.stage, err)
		}
		d.staged = true
	}
	at := d.stage
	if path != "" {
		at = join(d.stage, path)
	}
	return cloneMount(unix.AT_FDCWD, at, false)
}

// done detaches the tree from its stage, if it was staged.
func (d *detachedTree) done() error {
	if !d.staged {
		return nil
	}
	d.staged = false
	if err := unix.Unmount(d.stage, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unstage %s: %w", d.stage, err)
	}
	return os.Remove(d.stage)
}

// setMountAttr sets flags (MOUNT_ATTR_*) on a detached or attached mount
// and makes it private, so nothing propagates to or from the host.
func setMountAttr(fd int, set uint64, recursive bool) error {
	flags := unix.AT_EMPTY_PATH
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	attr := unix.MountAttr{Attr_set: set, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", uint(flags), &attr); err != nil {
		return fmt.Errorf("mount_setattr %#x: %w", set, err)
	}
	return nil
}

// attachMount attaches the detached mount fd at path and closes fd.
func attachMount(fd int, path string) error {
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach mount at %s: %w", path, err)
	}
	return nil
}

// newFS creates a detached mount of a fresh filesystem of type fstype with
// the given options and mount flags.
func newFS(fstype string, opts [][2]string, attrs uint64) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen %s: %w", fstype, err)
	}
	defer unix.Close(fsfd)
	for _, o := range opts {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return -1, fmt.Errorf("%s option %s=%s: %w", fstype, o[0], o[1], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create %s: %w", fstype, err)
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, int(attrs))
	if err != nil {
		return -1, fmt.Errorf("fsmount %s: %w", fstype, err)
	}
	return fd, nil
}

// mountPoint creates an empty folder (dir) or file at dst for a mount to
// land on.
func mountPoint(dst string, dir bool) error {
	if dir {
		return os.MkdirAll(dst, 0o755)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
