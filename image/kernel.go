package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// KernelPackage is the Debian package guest kernels come from: Debian's
// kernel for virtual machines, with the virtio drivers as modules.
const KernelPackage = "linux-image-cloud-amd64"

// Kernel is a guest kernel for the microvm backend, unpacked from
// KernelPackage into a folder of kernels.
type Kernel struct {
	// Release is the kernel's release, as uname -r says it
	// ("6.1.0-57-cloud-amd64").
	Release string `json:"release"`
	// Package and Version name the Debian package the kernel came from.
	Package string `json:"package"`
	Version string `json:"version"`
	// Dir holds vmlinuz, modules/ (the package's lib/modules/RELEASE)
	// and kernel.json.
	Dir string `json:"-"`
}

// Names inside a kernel's folder.
const (
	kernelFile     = "vmlinuz"
	kernelModules  = "modules"
	kernelManifest = "kernel.json"
)

// Image is the kernel's bzImage.
func (k *Kernel) Image() string { return filepath.Join(k.Dir, kernelFile) }

// ModulesDir is the folder of the kernel's modules (lib/modules/RELEASE).
func (k *Kernel) ModulesDir() string { return filepath.Join(k.Dir, kernelModules) }

// KernelDir is the store's folder of kernels.
func (s *Store) KernelDir() string { return filepath.Join(s.dir, ".kernels") }

// FindKernel returns the kernel of the highest release in dir, a folder
// of kernels; sandbox.ErrNotFound when there is none.
func FindKernel(dir string) (*Kernel, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var found []*Kernel
	for _, e := range ents {
		k, err := readKernel(filepath.Join(dir, e.Name()))
		if err == nil {
			found = append(found, k)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no guest kernel in %s (fetch one with 'airlock image kernel'): %w", dir, sandbox.ErrNotFound)
	}
	sort.Slice(found, func(i, j int) bool { return releaseLess(found[i].Release, found[j].Release) })
	return found[len(found)-1], nil
}

// readKernel reads one kernel folder's manifest and checks its files.
func readKernel(dir string) (*Kernel, error) {
	b, err := os.ReadFile(filepath.Join(dir, kernelManifest))
	if err != nil {
		return nil, err
	}
	k := &Kernel{Dir: dir}
	if err := json.Unmarshal(b, k); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", dir, err)
	}
	if filepath.Base(dir) != k.Release {
		return nil, fmt.Errorf("kernel %s: folder does not match release %q", dir, k.Release)
	}
	for _, p := range []string{k.Image(), k.ModulesDir()} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", dir, err)
		}
	}
	return k, nil
}

// releaseLess orders kernel releases by their numbers ("6.1.0-57" before
// "6.1.0-100"), then as text.
func releaseLess(a, b string) bool {
	na, nb := releaseNumbers(a), releaseNumbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return a < b
}

func releaseNumbers(s string) []int {
	var out []int
	n, in := 0, false
	for _, c := range s {
		if c >= '0' && c <= '9' {
			n, in = n*10+int(c-'0'), true
			continue
		}
		if in {
			out = append(out, n)
		}
		n, in = 0, false
	}
	if in {
		out = append(out, n)
	}
	return out
}
