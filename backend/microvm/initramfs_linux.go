package microvm

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/microvm/guest"
)

// The initramfs holds the agent (this very binary, as guest.Path), the
// shared libraries it needs when it is linked dynamically, the kernel
// modules the machine needs with their load order, /dev/console for the
// kernel to give the agent its first descriptors, and empty mount points.
// Nothing else: no shell, no tools.

// guestModules are the modules the guest loads, besides what they need:
// the virtio-mmio transport, the disk, the serial port, the image's file
// system, vsock for hosts with vhost-vsock, and the balloon, whose free
// page reporting gives the host back the memory the guest frees.
var guestModules = []string{"virtio_mmio", "virtio_blk", "virtio_console", "erofs", "vmw_vsock_virtio_transport", "virtio_balloon"}

// cpioWriter writes an archive in the "newc" format the kernel unpacks.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) header(name string, mode uint32, size int, rdevMajor, rdevMinor int) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad(len(hdr) + len(name) + 1)
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) dir(name string) { c.header(name, 0o040755, 0, 0, 0) }

func (c *cpioWriter) file(name string, mode uint32, data []byte) {
	c.header(name, 0o100000|mode, len(data), 0, 0)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) charDev(name string, major, minor int) {
	c.header(name, 0o020600, 0, major, minor)
}

func (c *cpioWriter) close() error {
	c.header("TRAILER!!!", 0, 0, 0, 0)
	return c.err
}

// writeInitramfs writes the initramfs of the agent binary exe and the
// kernel modules in modDir to w.
func writeInitramfs(w io.Writer, exe []byte, modDir string) error {
	libs, err := sharedLibraries(exe)
	if err != nil {
		return err
	}
	mods, err := moduleOrder(modDir, guestModules)
	if err != nil {
		return err
	}
	c := &cpioWriter{w: w}
	made := map[string]bool{}
	mkdirs := func(p string) {
		var parts []string
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			parts = append(parts, d)
		}
		for i := len(parts) - 1; i >= 0; i-- {
			if !made[parts[i]] {
				made[parts[i]] = true
				c.dir(strings.TrimPrefix(parts[i], "/"))
			}
		}
	}
	for _, d := range []string{"/dev", "/proc", "/sys", "/run", "/tmp", guest.ModulesDir} {
		mkdirs(d + "/x")
	}
	c.charDev("dev/console", 5, 1)
	c.file(strings.TrimPrefix(guest.Path, "/"), 0o755, exe)
	for _, l := range libs {
		b, err := os.ReadFile(l.from)
		if err != nil {
			return err
		}
		mkdirs(l.at)
		c.file(strings.TrimPrefix(l.at, "/"), 0o755, b)
	}
	var order []string
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		name := filepath.Base(m)
		order = append(order, name)
		c.file(strings.TrimPrefix(guest.ModulesDir+"/"+name, "/"), 0o644, b)
	}
	c.file(strings.TrimPrefix(guest.ModulesOrder, "/"), 0o644, []byte(strings.Join(order, "\n")+"\n"))
	return c.close()
}

// library is one shared object: where the program asks for it and the
// host file it is read from.
type library struct{ at, from string }

// libraryDirs are searched, in order, for the libraries a program needs
// by name, as the dynamic loader of a Debian amd64 host does.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// sharedLibraries lists what a dynamically linked program needs to run:
// its loader (PT_INTERP) and every DT_NEEDED library, transitively. A
// static program needs none.
func sharedLibraries(exe []byte) ([]library, error) {
	f, err := elf.NewFile(bytes.NewReader(exe))
	if err != nil {
		return nil, fmt.Errorf("the agent binary: %w", err)
	}
	defer f.Close()
	var out []library
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return nil, err
		}
		interp := strings.TrimRight(string(b), "\x00")
		real, err := filepath.EvalSymlinks(interp)
		if err != nil {
			return nil, fmt.Errorf("the agent's loader %s: %w", interp, err)
		}
		out = append(out, library{at: interp, from: real})
	}
	seen := map[string]bool{}
	var need func(f *elf.File) error
	need = func(f *elf.File) error {
		names, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			at := ""
			for _, d := range libraryDirs {
				if _, err := os.Stat(filepath.Join(d, n)); err == nil {
					at = filepath.Join(d, n)
					break
				}
			}
			if at == "" {
				return fmt.Errorf("the agent needs %s, which is in none of %v", n, libraryDirs)
			}
			real, err := filepath.EvalSymlinks(at)
			if err != nil {
				return err
			}
			out = append(out, library{at: at, from: real})
			lf, err := elf.Open(real)
			if err != nil {
				return err
			}
			err = need(lf)
			lf.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := need(f); err != nil {
		return nil, err
	}
	return out, nil
}

// moduleOrder finds the modules named in want, and those they depend on,
// in modDir (a kernel's lib/modules/RELEASE), and orders them so that
// each comes after what it depends on. A module built into the kernel
// (modules.builtin) needs no file.
func moduleOrder(modDir string, want []string) ([]string, error) {
	norm := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	files := map[string]string{}
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			files[norm(strings.TrimSuffix(d.Name(), ".ko"))] = p
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[norm(strings.TrimSuffix(filepath.Base(l), ".ko"))] = true
		}
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string) error
	visit = func(name string) error {
		name = norm(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module %s depends on itself", name)
		case 2:
			return nil
		}
		p, ok := files[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("module %s is not in %s: %w", name, modDir, fs.ErrNotExist)
		}
		state[name] = 1
		deps, err := moduleDepends(p)
		if err != nil {
			return err
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, p)
		return nil
	}
	for _, w := range want {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, errors.New(path + ": no .modinfo section")
	}
	b, err := s.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
