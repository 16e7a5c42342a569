// Package testimage is internal/testimage under the name the backends'
// tests import: the package moved up so that the tests outside backend/
// (the agent's, the MCP server's) can reach the python image too.
package testimage

import (
	"testing"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Name is the image the suites run.
const Name = testimage.Name

// Store returns a store that holds the python image, or skips t (fails it
// under CI) saying how to build one.
func Store(t testing.TB) *image.Store { t.Helper(); return testimage.Store(t) }

// Find returns a store that holds the python image, or why there is none.
func Find() (*image.Store, error) { return testimage.Find() }

// CacheDir is the CI cache, where .ci/lib builds runsc and the images.
func CacheDir() string { return testimage.CacheDir() }

// Folder returns the python image's root file system as a folder image
// (see internal/testimage.Folder), or skips t as Store does.
func Folder(t testing.TB) string { t.Helper(); return testimage.Folder(t) }

// Resolve returns the python image as a resolved reference, or why there
// is none.
func Resolve() (sandbox.Image, error) { return testimage.Resolve() }
