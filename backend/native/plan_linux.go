package native

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/backend/internal/hostroot"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
	"golang.org/x/sys/unix"
)

// The sandbox's root is a fresh tmpfs. Into it go read-only binds of the
// image's folders, a synthesized /etc, a minimal /dev, a fresh /proc with
// its sensitive files masked, and the writable folders. The supervisor
// decides what goes in (this file); init, inside the new namespaces,
// carries it out (nsinit.buildRoot).

// imageReserved are top-level names of an image folder that the sandbox
// provides itself.
var imageReserved = map[string]bool{
	"proc": true, "dev": true, "sys": true, "tmp": true, "workspace": true, "run": true,
}

// hostPlan builds the root for the "host" image: the host's system
// folders read-only under a made-up /etc (package hostroot, which the
// gvisor backend uses too).
func hostPlan(uid, gid int) ([]nsinit.RootEntry, error) {
	entries, err := hostroot.Plan(uid, gid, nsinit.Hostname)
	if err != nil {
		return nil, err
	}
	plan := make([]nsinit.RootEntry, len(entries))
	for k, e := range entries {
		plan[k] = rootEntry(e)
	}
	return plan, nil
}

// rootEntry converts a hostroot entry for init.
func rootEntry(e hostroot.Entry) nsinit.RootEntry {
	return nsinit.RootEntry{Kind: e.Kind, Dst: e.Dst, Src: e.Src, Target: e.Target, Content: e.Content, Mode: e.Mode}
}

// dirPlan builds the root for an image folder: every top-level entry but
// the reserved ones, bound read-only.
func dirPlan(dir string) ([]nsinit.RootEntry, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("image %s is not a folder", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder %s: %w", dir, err)
	}
	var plan []nsinit.RootEntry
	for _, de := range ents {
		if imageReserved[de.Name()] {
			continue
		}
		e, ok, err := hostroot.FromHost(filepath.Join(dir, de.Name()), de.Name())
		if err != nil {
			return nil, err
		}
		if ok {
			plan = append(plan, rootEntry(e))
		}
	}
	if len(plan) == 0 {
		return nil, fmt.Errorf("image folder %s is empty", dir)
	}
	return plan, nil
}

// cloneBinds makes, as host root, a detached read-only, nosuid, nodev
// copy of every bind source of the plan, in order, and marks each entry
// as a folder or a file. Init attaches them in its root: it need not be
// able to reach the source path itself (a folder under a private home,
// or under /tmp, which init's own root covers).
func cloneBinds(plan []nsinit.RootEntry) ([]*os.File, error) {
	var out []*os.File
	for k := range plan {
		e := &plan[k]
		if e.Kind != nsinit.EntryBind {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, e.Src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			nsinit.CloseAll(out)
			return nil, fmt.Errorf("clone %s: %w", e.Src, err)
		}
		f := os.NewFile(uintptr(fd), e.Src)
		out = append(out, f)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			nsinit.CloseAll(out)
			return nil, fmt.Errorf("clone %s read-only: %w", e.Src, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			nsinit.CloseAll(out)
			return nil, fmt.Errorf("clone %s: %w", e.Src, err)
		}
		e.Dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	return out, nil
}

// markBinds marks each bind entry of the plan as a folder or a file, for
// init to clone itself (rootless).
func markBinds(plan []nsinit.RootEntry) error {
	for k := range plan {
		if e := &plan[k]; e.Kind == nsinit.EntryBind {
			st, err := os.Stat(e.Src)
			if err != nil {
				return err
			}
			e.Dir = st.IsDir()
		}
	}
	return nil
}
