//go:build !linux

package microvm

import (
	"github.com/airlock-sandbox/airlock/backend/internal/notlinux"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Backend is the microvm backend; it runs on Linux only.
type Backend struct{ notlinux.Backend }

var _ sandbox.Backend = (*Backend)(nil)

// New returns a backend whose every call reports that it needs Linux.
func New(opts Options) *Backend { return &Backend{notlinux.New("microvm")} }
