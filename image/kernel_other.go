//go:build !linux

package image

import (
	"context"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// FetchKernel needs Debian's apt-get and Linux, so it fails on other
// systems with an error wrapping sandbox.ErrUnsupported.
func FetchKernel(ctx context.Context, dir string, log io.Writer) (*Kernel, error) {
	return nil, fmt.Errorf("fetch a guest kernel: needs Linux: %w", sandbox.ErrUnsupported)
}
