//go:build !linux

package docker

import (
	"context"

	"github.com/airlock-sandbox/airlock/backend/internal/notlinux"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Backend is the docker backend; it runs on Linux only.
type Backend struct{ notlinux.Backend }

var _ sandbox.Backend = (*Backend)(nil)

// New returns a backend whose every call reports that it needs Linux.
func New(opts Options) *Backend { return &Backend{notlinux.New("docker")} }

// Runtime is empty: no container runs here.
func (b *Backend) Runtime(ctx context.Context) string { return "" }
