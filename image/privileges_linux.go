package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// capabilityXattr holds a file's capabilities (setcap).
const capabilityXattr = "security.capability"

// privilegeFinding is one file that could raise privileges or reach a
// device: a setuid or setgid bit, file capabilities, or a special file.
type privilegeFinding struct {
	Path string // absolute inside the image
	What string // "setuid", "setgid", "capabilities", "device", "fifo", "socket"
}

func (f privilegeFinding) String() string { return f.Path + " (" + f.What + ")" }

// scanPrivileges walks root without following links and reports every
// privilege finding. With fix it also removes each one: it clears the
// setuid and setgid bits, drops the capability attribute and deletes
// special files; the findings returned are then those it fixed.
func scanPrivileges(ctx context.Context, root string, fix bool) ([]privilegeFinding, error) {
	var found []privilegeFinding
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		whats, err := checkEntry(p, fi, fix)
		for _, what := range whats {
			found = append(found, privilegeFinding{Path: imagePath(root, p), What: what})
		}
		return err
	})
	if err != nil {
		return found, fmt.Errorf("scan %s for privileges: %w", root, err)
	}
	return found, nil
}

// checkEntry returns what is wrong with one entry and, with fix, repairs it.
func checkEntry(p string, fi fs.FileInfo, fix bool) ([]string, error) {
	if what := specialKind(fi.Mode()); what != "" {
		if fix {
			return []string{what}, os.Remove(p)
		}
		return []string{what}, nil
	}
	if fi.Mode().Type() == fs.ModeSymlink {
		return nil, nil
	}
	var found []string
	if fi.Mode()&fs.ModeSetuid != 0 {
		found = append(found, "setuid")
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		found = append(found, "setgid")
	}
	if fix && len(found) > 0 {
		if err := os.Chmod(p, fi.Mode()&^(fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return found, err
		}
	}
	hasCaps, err := hasCapabilities(p)
	if err != nil || !hasCaps {
		return found, err
	}
	found = append(found, "capabilities")
	if fix {
		err = unix.Lremovexattr(p, capabilityXattr)
	}
	return found, err
}

// specialKind names a device, fifo or socket, and is empty for the rest.
func specialKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return ""
}

func hasCapabilities(p string) (bool, error) {
	_, err := unix.Lgetxattr(p, capabilityXattr, nil)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
		return false, nil
	}
	return false, fmt.Errorf("read capabilities of %s: %w", p, err)
}

// privilegeError turns findings into one error listing the first few.
func privilegeError(found []privilegeFinding) error {
	if len(found) == 0 {
		return nil
	}
	list := make([]string, 0, min(len(found), 10))
	for _, f := range found[:min(len(found), 10)] {
		list = append(list, f.String())
	}
	return fmt.Errorf("%d privileged or special files remain: %s", len(found), strings.Join(list, ", "))
}
