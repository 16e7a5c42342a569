//go:build !linux

package image

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Build needs debootstrap, chroot and Linux namespaces, so it fails on
// other systems with an error wrapping sandbox.ErrUnsupported.
func (s *Store) Build(ctx context.Context, name string, def Definition, opts BuildOptions) (*Image, error) {
	return nil, fmt.Errorf("build image %q: building images needs Linux: %w", name, sandbox.ErrUnsupported)
}
