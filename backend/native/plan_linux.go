package native

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/backend/internal/hostroot"
	"github.com/airlock-sandbox/airlock/backend/native/nsinit"
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
