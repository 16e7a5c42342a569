//go:build !linux

package native

import (
	"context"
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Backend is the native backend; it runs on Linux only.
type Backend struct{}

var _ sandbox.Backend = (*Backend)(nil)

var errNotLinux = fmt.Errorf("native backend: Linux only, this is %s: %w", runtime.GOOS, sandbox.ErrUnsupported)

// New returns a backend whose every call reports that it needs Linux.
func New(opts Options) *Backend { return &Backend{} }

// Name is "native".
func (b *Backend) Name() string { return "native" }

// Capabilities reports nothing: no mechanism is available here.
func (b *Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	return sandbox.Capabilities{Backend: b.Name()}
}

// Probe reports that the backend needs Linux.
func (b *Backend) Probe(ctx context.Context) error { return errNotLinux }

// Create reports that the backend needs Linux.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return nil, errNotLinux
}

// CleanupStale has nothing to clean here.
func (b *Backend) CleanupStale() []string { return nil }

// Close has nothing to stop here.
func (b *Backend) Close() error { return nil }
