package image

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Resolve turns the name a caller gave an image into the reference every
// backend takes: "host" (or "") is the host's own system folders, a name
// with a slash or a leading dot is a rootfs folder, and any other name is
// a built image of images (which may be nil: then only the first two
// forms resolve). Errors wrap sandbox.ErrNotFound.
func Resolve(images Lookup, name string) (sandbox.Image, error) {
	switch {
	case name == "" || name == "host":
		return sandbox.HostImage(), nil
	case strings.ContainsRune(name, '/') || strings.HasPrefix(name, "."):
		abs, err := filepath.Abs(name)
		if err != nil {
			return sandbox.Image{}, fmt.Errorf("image folder %s: %w", name, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return sandbox.Image{}, fmt.Errorf("image folder: %w: %w", err, sandbox.ErrNotFound)
		}
		if !st.IsDir() {
			return sandbox.Image{}, fmt.Errorf("image folder %s: not a folder: %w", abs, sandbox.ErrNotFound)
		}
		return sandbox.Image{Name: name, RootFS: abs}, nil
	case images != nil:
		img, err := images.Get(name)
		if err != nil {
			return sandbox.Image{}, fmt.Errorf("%w: not built (build it with 'airlock image build %s')", err, name)
		}
		return sandbox.Image{Name: name, RootFS: img.RootFS(), Digest: img.Manifest.Digest, Env: img.Manifest.Env}, nil
	}
	return sandbox.Image{}, fmt.Errorf("image %q: not built (see 'airlock image ls'), and not a folder: %w", name, sandbox.ErrNotFound)
}
