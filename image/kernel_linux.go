package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// FetchKernel downloads Debian's KernelPackage with apt-get (the mirror
// the host's apt configuration names), unpacks it with dpkg-deb, and
// keeps its kernel and modules in dir, a folder of kernels, under the
// kernel's release; it returns the kernel already there when that
// release was fetched before. Progress lines go to log, if set.
func FetchKernel(ctx context.Context, dir string, log io.Writer) (*Kernel, error) {
	if log == nil {
		log = io.Discard
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("fetching a guest kernel needs %s (a Debian host): %w", tool, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockFileAt(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	pkg, version, err := kernelDependency(ctx)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, ".fetch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "kernel: downloading %s %s\n", pkg, version)
	if err := runIn(ctx, tmp, "apt-get", "download", "-q", pkg+"="+version); err != nil {
		return nil, err
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
	}
	x := filepath.Join(tmp, "x")
	if err := runIn(ctx, tmp, "dpkg-deb", "-x", debs[0], x); err != nil {
		return nil, err
	}
	mods, _ := filepath.Glob(filepath.Join(x, "lib", "modules", "*"))
	images, _ := filepath.Glob(filepath.Join(x, "boot", "vmlinuz-*"))
	if len(mods) != 1 || len(images) != 1 {
		return nil, fmt.Errorf("%s: want one kernel and one module folder, found %d and %d", pkg, len(images), len(mods))
	}
	release := filepath.Base(mods[0])
	if k, err := readKernel(filepath.Join(dir, release)); err == nil {
		fmt.Fprintf(log, "kernel: %s is there already\n", release)
		return k, nil
	}
	out := filepath.Join(tmp, release)
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(images[0], filepath.Join(out, kernelFile)); err != nil {
		return nil, err
	}
	if err := os.Rename(mods[0], filepath.Join(out, kernelModules)); err != nil {
		return nil, err
	}
	k := &Kernel{Release: release, Package: pkg, Version: version, Dir: filepath.Join(dir, release)}
	b, _ := json.MarshalIndent(k, "", "  ")
	if err := os.WriteFile(filepath.Join(out, kernelManifest), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(out, k.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	fmt.Fprintf(log, "kernel: %s kept in %s\n", release, k.Dir)
	return k, nil
}

// kernelDependency finds the versioned kernel package that KernelPackage,
// a metapackage, depends on, and its candidate version.
func kernelDependency(ctx context.Context) (string, string, error) {
	out, err := output(ctx, "apt-cache", "depends", KernelPackage)
	if err != nil {
		return "", "", fmt.Errorf("%w (run apt-get update first?)", err)
	}
	pkg := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			pkg = f[1]
			break
		}
	}
	if pkg == "" {
		return "", "", fmt.Errorf("%s depends on no linux-image package", KernelPackage)
	}
	out, err = output(ctx, "apt-cache", "policy", pkg)
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate: "); ok && v != "(none)" {
			return pkg, v, nil
		}
	}
	return "", "", fmt.Errorf("%s has no candidate version", pkg)
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func runIn(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
