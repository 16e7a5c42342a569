//go:build !unix

package image

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func lockFileAt(path string) (*os.File, error) {
	return nil, fmt.Errorf("lock %s: file locks: %w", path, sandbox.ErrUnsupported)
}

func lockDir(dir string, _ bool) (*os.File, error) {
	return nil, fmt.Errorf("lock %s: file locks: %w", dir, sandbox.ErrUnsupported)
}
