// Package testimage finds, for the tests that run images (the backends',
// the agent's, the MCP server's), the built-in python image that
// .ci/lib/image.sh builds: in $AIRLOCK_HOME's store, else in the newest
// store of the CI cache; and, for the tests that boot microvm machines, a
// folder of guest kernels.
package testimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Name is the image the suites run.
const Name = "python"

// Store returns a store that holds the python image, or skips t (fails it
// under CI) saying how to build one.
func Store(t testing.TB) *image.Store {
	t.Helper()
	s, err := Find()
	testenv.Require(t, "the python image (build it with: bash .ci/lib/image.sh, then set AIRLOCK_HOME to the folder it prints)", err)
	return s
}

// Find returns a store that holds the python image, or why there is none.
func Find() (*image.Store, error) {
	s, _, err := find()
	return s, err
}

// Home returns the airlock home folder (AIRLOCK_HOME) whose store holds
// the python image, for tests that start airlock as a process.
func Home() (string, error) {
	_, home, err := find()
	return home, err
}

func find() (*image.Store, string, error) {
	var dirs []string
	if h := os.Getenv("AIRLOCK_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "images"))
	}
	homes, _ := filepath.Glob(filepath.Join(CacheDir(), "home-*", "images"))
	sort.Slice(homes, func(i, j int) bool { return modTime(homes[i]) > modTime(homes[j]) })
	dirs = append(dirs, homes...)
	for _, d := range dirs {
		s, err := image.OpenStore(d)
		if err != nil {
			continue
		}
		if _, err := s.Get(Name); err == nil {
			return s, filepath.Dir(d), nil
		}
	}
	if len(dirs) == 0 {
		return nil, "", errors.New("AIRLOCK_HOME is not set and the CI cache has no image store")
	}
	return nil, "", fmt.Errorf("no %s image in %v", Name, dirs)
}

func modTime(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}

// CacheDir is the CI cache, where .ci/lib builds runsc and the images.
func CacheDir() string {
	if c := os.Getenv("AIRLOCK_CI_CACHE"); c != "" {
		return c
	}
	return "/var/cache/airlock-ci"
}

// Folder returns the python image's root file system as a folder image:
// the same files, without the image's own environment (which the suite's
// environment check does not expect), or skips t as Store does.
func Folder(t testing.TB) string {
	t.Helper()
	img, err := Store(t).Get(Name)
	if err != nil {
		t.Fatal(err)
	}
	return img.RootFS()
}

// Resolve returns the python image as a resolved reference, or why there
// is none.
func Resolve() (sandbox.Image, error) {
	s, err := Find()
	if err != nil {
		return sandbox.Image{}, err
	}
	return image.Resolve(s, Name)
}

var (
	kernelOnce sync.Once
	kernelDir  string
	kernelErr  error
)

// Kernels returns a folder of guest kernels for the microvm backend:
// $AIRLOCK_MICROVM_KERNELS, or the CI cache's. If it has none, the
// kernel is fetched into it, once per process (image.FetchKernel locks
// the folder, so processes that fetch at once do not collide). It skips
// t (fails it under CI) when there is no kernel to be had.
func Kernels(t testing.TB) string {
	t.Helper()
	kernelOnce.Do(func() {
		kernelDir = os.Getenv("AIRLOCK_MICROVM_KERNELS")
		if kernelDir == "" {
			kernelDir = filepath.Join(CacheDir(), "kernels")
		}
		if _, err := image.FindKernel(kernelDir); err == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_, kernelErr = image.FetchKernel(ctx, kernelDir, nil)
	})
	testenv.Require(t, "a guest kernel ("+image.KernelPackage+", fetched with apt-get download)", kernelErr)
	return kernelDir
}
