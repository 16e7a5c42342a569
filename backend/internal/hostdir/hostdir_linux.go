package hostdir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// Paths inside the sandbox that the folders are bound at.
const (
	TmpTarget    = "/tmp"
	OutputTarget = "/workspace/output"
	ShmTarget    = "/dev/shm"
	InputTarget  = "/workspace/input"
	// IOTarget holds the FIFOs of processes' stdio (Options.IO).
	IOTarget = "/run/airlock"
)

// mountFlags are the flags of every tmpfs: nothing on them is a device,
// is executable, or raises privileges.
const mountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// ioInodes bounds the FIFOs of the io tmpfs: three per process.
const ioInodes = 4096

// Options describe one sandbox's folder.
type Options struct {
	// Base is the folder that holds every sandbox folder of one backend.
	// It is created if missing: mode 0700, or 0710 with group RootGID.
	Base string
	// ID is the sandbox id; the folder is named Owner()-ID.
	ID string
	// UID and GID own the writable folders and what Files creates (the
	// sandbox user as the host sees it).
	UID, GID int
	// RootGID, when not 0, is the host group of a runtime that reaches
	// the folders from inside a user namespace (Docker's remapped root):
	// the folders on the way get search permission for that group only.
	RootGID int
	// DiskBytes and DiskInodes cap the scratch tmpfs; InputBytes caps the
	// input tmpfs.
	DiskBytes, DiskInodes, InputBytes int64
	// IO adds a small tmpfs for the FIFOs that carry processes' stdio,
	// bound at IOTarget (see MakeFIFOs).
	IO bool
}

// Bind is one host folder bound into the sandbox.
type Bind struct {
	Source, Target string
	ReadOnly       bool
}

// Dir is one sandbox's folder on the host.
type Dir struct {
	path string
	opts Options

	mu      sync.RWMutex
	fs      *dirfs.FS // nil once removed
	removed bool
}

// errRemoved answers calls on a removed folder: its sandbox is destroyed.
var errRemoved = fmt.Errorf("sandbox folder removed: %w", sandbox.ErrDestroyed)

// Create makes the folder, mounts the tmpfs and makes the writable
// folders. On error nothing is left behind.
func Create(o Options) (d *Dir, err error) {
	if err := makeFolder(o.Base, o.RootGID, true); err != nil {
		return nil, fmt.Errorf("sandbox folders: %w", err)
	}
	d = &Dir{path: filepath.Join(o.Base, Owner()+"-"+o.ID), opts: o}
	if err := makeFolder(d.path, o.RootGID, false); err != nil {
		return nil, fmt.Errorf("sandbox folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = d.Remove()
		}
	}()
	if err := mountTmpfs(d.scratch(), fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", o.DiskBytes, o.DiskInodes)); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		name string
		mode uint32
	}{{"tmp", 0o1777}, {"output", 0o755}, {"shm", 0o1777}} {
		dir := filepath.Join(d.scratch(), p.name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := os.Lchown(dir, o.UID, o.GID); err != nil {
			return nil, fmt.Errorf("scratch %s: %w", p.name, err)
		}
		if err := unix.Chmod(dir, p.mode); err != nil {
			return nil, fmt.Errorf("scratch %s: %w", p.name, err)
		}
	}
	inputOpts := "mode=0755"
	if o.InputBytes > 0 {
		inputOpts += fmt.Sprintf(",size=%d", o.InputBytes)
	}
	if err := mountTmpfs(d.input(), inputOpts); err != nil {
		return nil, err
	}
	if o.IO {
		if err := mountTmpfs(d.io(), fmt.Sprintf("size=64k,nr_inodes=%d,mode=0711", ioInodes)); err != nil {
			return nil, err
		}
	}
	d.fs, err = d.openFS()
	return d, err
}

// makeFolder makes dir (a shared base with its parents, if missing)
// with mode 0700, or 0710 and group gid when gid is not 0.
func makeFolder(dir string, gid int, shared bool) error {
	mode := os.FileMode(0o700)
	if gid != 0 {
		mode = 0o710
	}
	var err error
	if shared {
		err = os.MkdirAll(dir, mode)
	} else {
		err = os.Mkdir(dir, mode)
	}
	if err != nil {
		return err
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

func mountTmpfs(dir, opts string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", mountFlags, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// openFS opens the roots of Files: /tmp and /workspace/output on the
// scratch tmpfs, /workspace/input on the input one (read-only to the
// code: its bind is read-only).
func (d *Dir) openFS() (*dirfs.FS, error) {
	var roots []dirfs.Root
	for _, r := range []struct {
		path, dir string
		ro        bool
	}{
		{TmpTarget, filepath.Join(d.scratch(), "tmp"), false},
		{OutputTarget, d.output(), false},
		{InputTarget, d.input(), true},
	} {
		f, err := os.OpenFile(r.dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			for _, o := range roots {
				o.Dir.Close()
			}
			return nil, fmt.Errorf("sandbox folder %s: %w", r.path, err)
		}
		roots = append(roots, dirfs.Root{Path: r.path, Dir: f, UID: d.opts.UID, GID: d.opts.GID, ReadOnly: r.ro})
	}
	return dirfs.New(roots...), nil
}

// Path is the sandbox's folder.
func (d *Dir) Path() string { return d.path }

func (d *Dir) scratch() string { return filepath.Join(d.path, "scratch") }
func (d *Dir) input() string   { return filepath.Join(d.path, "input") }
func (d *Dir) output() string  { return filepath.Join(d.scratch(), "output") }
func (d *Dir) io() string      { return filepath.Join(d.path, "io") }

// Binds lists the folders to bind into the sandbox, in mount order.
func (d *Dir) Binds() []Bind {
	b := []Bind{
		{Source: filepath.Join(d.scratch(), "tmp"), Target: TmpTarget},
		{Source: d.output(), Target: OutputTarget},
		{Source: filepath.Join(d.scratch(), "shm"), Target: ShmTarget},
		{Source: d.input(), Target: InputTarget, ReadOnly: true},
	}
	if d.opts.IO {
		b = append(b, Bind{Source: d.io(), Target: IOTarget})
	}
	return b
}

// OpenOutputDir opens the output folder for the artifact filter, without
// following a link in its last component.
func (d *Dir) OpenOutputDir() (*os.File, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.removed {
		return nil, errRemoved
	}
	f, err := os.OpenFile(d.output(), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	return f, nil
}

// Remove unmounts the tmpfs and deletes the folder; Files and
// OpenOutputDir fail from then on. It is idempotent.
func (d *Dir) Remove() error {
	d.mu.Lock()
	d.removed = true
	if d.fs != nil {
		d.fs.Close()
		d.fs = nil
	}
	d.mu.Unlock()
	return RemovePath(d.path)
}

// RemovePath unmounts whatever is mounted beneath path (the tmpfs, and
// what a runtime mounted in its state folder), deepest first, then
// deletes it. A missing path is not an error.
func RemovePath(path string) error {
	var errs []error
	mounts, err := mountsBeneath(path)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountsBeneath lists the mount points at or under path in this
// process's mount table, deepest first.
func mountsBeneath(path string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := unescapeMount(f[4]); mp == path || strings.HasPrefix(mp, path+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (space, tab, newline,
// backslash).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Stale removes the folders under base whose owner process is gone and
// returns their paths; before, when set, is called first with each
// folder and its sandbox id, to stop what still uses it. Folders of live
// processes are left alone.
func Stale(base string, before func(dir, id string)) []string {
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		owner, id, ok := SplitName(e.Name())
		if !ok || OwnerAlive(owner) {
			continue
		}
		p := filepath.Join(base, e.Name())
		if before != nil {
			before(p, id)
		}
		if RemovePath(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}

// NewID returns a fresh random sandbox id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PickID returns id if it is a valid sandbox id, and a fresh one if id is
// empty.
func PickID(id string) (string, error) {
	if id == "" {
		return NewID(), nil
	}
	return id, CheckID(id)
}

// CheckID accepts ids that are safe in folder and container names: 1 to
// 64 letters, digits, '_' and '.'. Errors wrap sandbox.ErrInvalid.
func CheckID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("sandbox id %q: 1 to 64 characters: %w", id, sandbox.ErrInvalid)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return fmt.Errorf("sandbox id %q: only letters, digits, '_' and '.': %w", id, sandbox.ErrInvalid)
		}
	}
	return nil
}

// Owner names this process as "PID-STARTTIME", so that a later airlock can
// tell what a dead process left from what a live one uses.
func Owner() string { return OwnerOf(os.Getpid()) }

// OwnerOf is Owner for another live process.
func OwnerOf(pid int) string {
	start, _ := processStart(pid)
	return fmt.Sprintf("%d-%d", pid, start)
}

// SplitName splits a folder name "PID-START-ID" into owner and id.
func SplitName(name string) (owner, id string, ok bool) {
	parts := strings.SplitN(name, "-", 3)
	if len(parts) != 3 || parts[2] == "" {
		return "", "", false
	}
	return parts[0] + "-" + parts[1], parts[2], true
}

// OwnerAlive tells whether the process an owner string names still runs.
// A zombie is dead: it runs no code and holds nothing but its entry. A
// string it cannot parse counts as alive: it is not ours to judge.
func OwnerAlive(owner string) bool {
	p, s, ok := strings.Cut(owner, "-")
	pid, err1 := strconv.Atoi(p)
	want, err2 := strconv.ParseUint(s, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return true
	}
	start, alive := processStart(pid)
	return alive && start == want
}

// processStart reads a process's start time in clock ticks, and whether
// it runs (is neither gone nor a zombie).
func processStart(pid int) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v, f[0] != "Z" && f[0] != "X"
}
