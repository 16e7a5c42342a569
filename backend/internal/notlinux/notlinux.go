// Package notlinux is what a Linux-only backend is on other systems: it
// builds, so that the CLI builds everywhere, and every call says that the
// backend needs Linux.
package notlinux

import (
	"context"
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Backend answers every call with ErrUnsupported. Backends embed it in
// their non-Linux builds.
type Backend struct {
	name string
	err  error
}

// New returns the stand-in of the backend called name.
func New(name string) Backend {
	return Backend{name: name, err: fmt.Errorf("%s backend: Linux only, this is %s: %w", name, runtime.GOOS, sandbox.ErrUnsupported)}
}

// Name is the backend's name.
func (b Backend) Name() string { return b.name }

// Features says the backend can do nothing here.
func (b Backend) Features() sandbox.Features { return sandbox.Features{} }

// Capabilities lists no mechanism: none is available here.
func (b Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	return sandbox.Capabilities{Backend: b.name}
}

// Probe reports that the backend needs Linux.
func (b Backend) Probe(ctx context.Context) error { return b.err }

// Create reports that the backend needs Linux.
func (b Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return nil, b.err
}

// CleanupStale has nothing to clean here.
func (b Backend) CleanupStale(ctx context.Context) []string { return nil }

// Close has nothing to release here.
func (b Backend) Close() error { return nil }
