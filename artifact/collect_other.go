//go:build !linux

package artifact

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// CollectTo needs openat2, which only Linux has; elsewhere it fails with
// sandbox.ErrUnsupported. Check works on every system.
func CollectTo(ctx context.Context, src *os.File, dst Destination, p sandbox.ArtifactPolicy) ([]sandbox.Artifact, error) {
	return nil, fmt.Errorf("artifact collection needs openat2 (Linux): %w", sandbox.ErrUnsupported)
}

// CheckFile needs openat2, which only Linux has; elsewhere it fails with
// sandbox.ErrUnsupported.
func CheckFile(ctx context.Context, root *os.File, rel string, out Output, p sandbox.ArtifactPolicy) (sandbox.Artifact, error) {
	return sandbox.Artifact{}, fmt.Errorf("artifact checks beneath a folder need openat2 (Linux): %w", sandbox.ErrUnsupported)
}

// Placer needs openat2, which only Linux has; elsewhere OpenPlacer fails
// with sandbox.ErrUnsupported.
type Placer struct{}

// OpenPlacer fails with sandbox.ErrUnsupported outside Linux.
func OpenPlacer(dst Destination) (*Placer, error) {
	return nil, fmt.Errorf("placing artifacts needs openat2 (Linux): %w", sandbox.ErrUnsupported)
}

// Place is never reached: OpenPlacer fails.
func (p *Placer) Place(rel string, r io.Reader) (string, error) {
	return "", fmt.Errorf("placing artifacts needs openat2 (Linux): %w", sandbox.ErrUnsupported)
}

// Save is never reached: OpenPlacer fails.
func (p *Placer) Save(_ context.Context, a sandbox.Artifact, r io.Reader) (string, error) {
	return p.Place(a.Path, r)
}

// Close does nothing.
func (p *Placer) Close() {}

// CollectTar writes beneath dst.Dir with openat2, which only Linux has;
// elsewhere it fails with sandbox.ErrUnsupported.
func CollectTar(ctx context.Context, src io.Reader, dst Destination, p sandbox.ArtifactPolicy) ([]sandbox.Artifact, error) {
	return nil, fmt.Errorf("artifact collection needs openat2 (Linux): %w", sandbox.ErrUnsupported)
}
