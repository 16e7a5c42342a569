package microvm

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// assets are what a virtual machine boots from: the kernel, the
// initramfs of this binary for that kernel, and the image's read-only
// disk. The initramfs and the disks are built once and kept in the cache
// folder, named after what they are made from: the initramfs after the
// binary's hash and the kernel's release, a disk after the image's
// digest. Every machine of an image shares its disk, read-only.
type assets struct {
	kernel    *image.Kernel
	initramfs string
	rootfs    string
}

// assetCache builds and finds assets in one folder.
type assetCache struct {
	dir string

	exeOnce sync.Once
	exe     []byte
	exeHash string
	exeErr  error
}

// diskFormat is the version of how disks are made; a change makes new
// ones.
const diskFormat = "erofs1"

// self reads this binary and hashes it, once.
func (c *assetCache) self() ([]byte, string, error) {
	c.exeOnce.Do(func() {
		c.exe, c.exeErr = os.ReadFile("/proc/self/exe")
		if c.exeErr == nil {
			sum := sha256.Sum256(c.exe)
			c.exeHash = hex.EncodeToString(sum[:8])
		}
	})
	return c.exe, c.exeHash, c.exeErr
}

// initramfs returns the initramfs of this binary for kernel k, building
// it when the cache has none.
func (c *assetCache) initramfs(k *image.Kernel) (string, error) {
	exe, hash, err := c.self()
	if err != nil {
		return "", fmt.Errorf("read this binary for the guest: %w", err)
	}
	p := filepath.Join(c.dir, "initramfs-"+hash+"-"+k.Release+".cpio")
	return p, c.build(p, func(w io.Writer) error { return writeInitramfs(w, exe, k.ModulesDir()) })
}

// rootfs returns the read-only disk of img, building it with mkfs.erofs
// when the cache has none.
func (c *assetCache) rootfs(ctx context.Context, img sandbox.Image) (string, error) {
	if img.IsHost() {
		return "", fmt.Errorf("the microvm backend runs built images and rootfs folders, not the host's own folders (--image python): %w", sandbox.ErrUnsupported)
	}
	digest := img.Digest
	if digest == "" {
		sum, err := image.Sum(ctx, img.RootFS)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", img.Name, err)
		}
		digest = sum.Digest
	}
	key := strings.TrimPrefix(digest, "sha256:")
	if len(key) > 32 {
		key = key[:32]
	}
	p := filepath.Join(c.dir, "rootfs-"+key+"-"+diskFormat+".img")
	return p, c.buildFile(p, func(tmp string) error {
		cmd := exec.CommandContext(ctx, "mkfs.erofs", "--quiet", tmp, img.RootFS)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.erofs %s: %w: %s", img.RootFS, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// build makes file p with write, unless it exists.
func (c *assetCache) build(p string, write func(io.Writer) error) error {
	return c.buildFile(p, func(tmp string) error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		err = write(bw)
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// buildFile makes file p with make, which writes a temporary path, under
// a lock of the cache folder so that two processes do not build the same
// file; the file appears under its name only once complete.
func (c *assetCache) buildFile(p string, make func(tmp string) error) error {
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(c.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	tmp := p + ".tmp"
	_ = os.Remove(tmp)
	if err := make(tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	c.prune(filepath.Base(p))
	return nil
}

// prune removes initramfs files of other binaries unused for a day: each
// rebuild of airlock makes a new one. QEMU reads its initramfs only when
// it starts, so a removal cannot break a running machine.
func (c *assetCache) prune(made string) {
	if !strings.HasPrefix(made, "initramfs-") {
		return
	}
	ents, _ := os.ReadDir(c.dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "initramfs-") || e.Name() == made {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			_ = os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}

// touch marks an asset as used, for prune.
func touch(p string) {
	now := time.Now()
	_ = os.Chtimes(p, now, now)
}

// errNoKernel wraps the error of a missing guest kernel.
func kernelError(dir string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("microvm backend: no guest kernel in %s (fetch one with 'airlock image kernel'): %w", dir, sandbox.ErrUnsupported)
	}
	return err
}
