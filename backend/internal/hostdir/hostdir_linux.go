package hostdir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// Paths inside the sandbox that the folders are bound at.
const (
	TmpTarget    = "/tmp"
	OutputTarget = "/workspace/output"
	ShmTarget    = "/dev/shm"
	InputTarget  = "/workspace/input"
)

// mountFlags are the flags of both tmpfs: nothing on them is a device, is
// executable, or raises privileges.
const mountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// Options describe one sandbox's folder.
type Options struct {
	// Base is the folder that holds every sandbox folder of one backend.
	// It is created with mode 0700 if missing.
	Base string
	// ID is the sandbox id; the folder is named Owner()-ID.
	ID string
	// UID and GID own the writable folders (the sandbox user as the host
	// sees it).
	UID, GID int
	// DiskBytes and DiskInodes cap the scratch tmpfs.
	DiskBytes, DiskInodes int64
}

// Bind is one host folder bound into the sandbox.
type Bind struct {
	Source, Target string
	ReadOnly       bool
}

// Dir is one sandbox's folder on the host.
type Dir struct {
	path    string
	removed atomic.Bool
}

// errRemoved answers calls on a removed folder: its sandbox is destroyed.
var errRemoved = fmt.Errorf("sandbox folder removed: %w", sandbox.ErrDestroyed)

// Create makes the folder, mounts both tmpfs and makes the writable
// folders. On error nothing is left behind.
func Create(o Options) (d *Dir, err error) {
	if err := os.MkdirAll(o.Base, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox folders: %w", err)
	}
	d = &Dir{path: filepath.Join(o.Base, Owner()+"-"+o.ID)}
	if err := os.Mkdir(d.path, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = d.Remove()
		}
	}()
	scratch := d.scratch()
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", o.DiskBytes, o.DiskInodes)
	if err := mountTmpfs(scratch, opts); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		name string
		mode uint32
	}{{"tmp", 0o1777}, {"output", 0o755}, {"shm", 0o1777}} {
		dir := filepath.Join(scratch, p.name)
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
	if err := mountTmpfs(d.input(), "mode=0755"); err != nil {
		return nil, err
	}
	return d, nil
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

// Path is the sandbox's folder.
func (d *Dir) Path() string { return d.path }

func (d *Dir) scratch() string { return filepath.Join(d.path, "scratch") }
func (d *Dir) input() string   { return filepath.Join(d.path, "input") }
func (d *Dir) output() string  { return filepath.Join(d.scratch(), "output") }

// Binds lists the folders to bind into the sandbox, in mount order.
func (d *Dir) Binds() []Bind {
	return []Bind{
		{Source: filepath.Join(d.scratch(), "tmp"), Target: TmpTarget},
		{Source: d.output(), Target: OutputTarget},
		{Source: filepath.Join(d.scratch(), "shm"), Target: ShmTarget},
		{Source: d.input(), Target: InputTarget, ReadOnly: true},
	}
}

// PutInput stores r as input/NAME, read-only for everyone. The file lives
// in RAM, charged to the caller, not to the sandbox's memory cap.
func (d *Dir) PutInput(ctx context.Context, name string, r io.Reader) error {
	if d.removed.Load() {
		return errRemoved
	}
	dir, err := os.OpenFile(d.input(), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("input folder: %w", err)
	}
	defer dir.Close()
	return WriteInput(ctx, dir, name, r, CreateInput)
}

// WriteInput stores r as NAME in the input folder dir: create makes the
// file (CreateInput, or a wrapper that runs it with other filesystem
// ids), the copy stops with ctx, and a file whose copy failed is removed.
func WriteInput(ctx context.Context, dir *os.File, name string, r io.Reader, create func(dir *os.File, name string) (*os.File, error)) error {
	if err := checkInputName(name); err != nil {
		return err
	}
	f, err := create(dir, name)
	if err != nil {
		return fmt.Errorf("input %s: %w", name, err)
	}
	_, err = io.Copy(f, contextReader{ctx, r})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
		return fmt.Errorf("input %s: %w", name, err)
	}
	return nil
}

// CreateInput creates a new read-only file name beneath dir, following
// no link and never replacing a file.
func CreateInput(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC,
		Mode:    0o444,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// contextReader stops a copy when its context ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// checkInputName accepts a plain file name: no folders, no dot names, no
// control characters. Errors wrap sandbox.ErrInvalid.
func checkInputName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, "/\\") {
		return fmt.Errorf("input name %q: must be a plain file name: %w", name, sandbox.ErrInvalid)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("input name %q: contains a control character: %w", name, sandbox.ErrInvalid)
		}
	}
	return nil
}

// OpenOutput opens the output folder for the artifact filter, without
// following a link in its last component.
func (d *Dir) OpenOutput() (*os.File, error) {
	if d.removed.Load() {
		return nil, errRemoved
	}
	f, err := os.OpenFile(d.output(), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	return f, nil
}

// Remove unmounts both tmpfs and deletes the folder; PutInput and
// OpenOutput fail from then on. It is idempotent.
func (d *Dir) Remove() error {
	d.removed.Store(true)
	return removeDir(d.path)
}

// removeDir unmounts whatever is mounted beneath path (the two tmpfs, and
// what a runtime mounted in its state folder), deepest first, then
// deletes it.
func removeDir(path string) error {
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
		if removeDir(p) == nil {
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

// CheckID accepts ids that are safe in folder and container names: 1 to
// PickID returns id if it is a valid sandbox id, and a fresh one if id is
// empty.
func PickID(id string) (string, error) {
	if id == "" {
		return NewID(), nil
	}
	return id, CheckID(id)
}

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
func OwnerOf(pid int) string { return fmt.Sprintf("%d-%d", pid, processStart(pid)) }

// SplitName splits a folder name "PID-START-ID" into owner and id.
func SplitName(name string) (owner, id string, ok bool) {
	parts := strings.SplitN(name, "-", 3)
	if len(parts) != 3 || parts[2] == "" {
		return "", "", false
	}
	return parts[0] + "-" + parts[1], parts[2], true
}

// OwnerAlive tells whether the process an owner string names still runs.
// A string it cannot parse counts as alive: it is not ours to judge.
func OwnerAlive(owner string) bool {
	p, s, ok := strings.Cut(owner, "-")
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return true
	}
	return processStart(pid) == start
}

// processStart reads a process's start time in clock ticks; 0 if gone.
func processStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
