package dirfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Resolve resolves every path beneath a root: no symbolic link, no magic
// link, no mount crossing, nothing above the root.
const Resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Limits bounding what one call may do.
const (
	maxPath    = 4096
	maxEntries = 100000 // entries one List returns
	maxDepth   = 256    // folder depth Remove descends
)

// Root is one folder tree the files API reaches.
type Root struct {
	// Path is where the tree is seen inside the sandbox, for example
	// "/tmp"; clean and absolute.
	Path string
	// Dir is an open descriptor of the tree's top folder; the FS keeps
	// it, and Close closes it.
	Dir *os.File
	// UID and GID own what the FS creates in this tree.
	UID, GID int
	// ReadOnly makes created files 0444 and folders 0555: the code reads
	// them and cannot change them (its mount is read-only too).
	ReadOnly bool
}

// FS carries out file operations beneath its roots.
type FS struct {
	roots []Root
}

// New returns an FS over roots. It takes ownership of their descriptors.
func New(roots ...Root) *FS { return &FS{roots: roots} }

// Close closes the roots' descriptors.
func (fs *FS) Close() {
	for _, r := range fs.roots {
		r.Dir.Close()
	}
}

// resolve finds the root that path lies in and the path relative to it,
// "." for the root itself.
func (fs *FS) resolve(p string) (*Root, string, error) {
	if p == "" || p[0] != '/' || len(p) > maxPath || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return nil, "", errorf(Invalid, "path %q: want a clean absolute path", p)
	}
	for i := range fs.roots {
		r := &fs.roots[i]
		if p == r.Path {
			return r, ".", nil
		}
		if rel, ok := strings.CutPrefix(p, r.Path+"/"); ok {
			return r, rel, nil
		}
	}
	return nil, "", errorf(Invalid, "path %s: not under %s", p, fs.rootList())
}

func (fs *FS) rootList() string {
	names := make([]string, len(fs.roots))
	for i, r := range fs.roots {
		names[i] = r.Path
	}
	return strings.Join(names, ", ")
}

// openBeneath opens rel beneath the root's folder without following links.
func openBeneath(dir int, rel string, flags int, mode uint32) (int, error) {
	return unix.Openat2(dir, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: Resolve})
}

// parent opens the folder that holds rel and returns it with rel's last
// name. mkdir creates the missing folders on the way.
func (r *Root) parent(rel string, mkdir bool) (int, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if mkdir {
		fd, err := r.mkdirAll(dir)
		return fd, base, err
	}
	fd, err := openBeneath(int(r.Dir.Fd()), dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// mkdirAll makes every missing folder of rel, one name at a time, and
// opens the last.
func (r *Root) mkdirAll(rel string) (int, error) {
	cur, err := unix.Dup(int(r.Dir.Fd()))
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return cur, nil
	}
	for _, name := range strings.Split(rel, "/") {
		err := unix.Mkdirat(cur, name, r.dirMode())
		if err == nil {
			err = unix.Fchownat(cur, name, r.UID, r.GID, unix.AT_SYMLINK_NOFOLLOW)
			if err == nil {
				err = unix.Fchmodat(cur, name, r.dirMode(), 0)
			}
		} else if errors.Is(err, unix.EEXIST) {
			err = nil
		}
		var next int
		if err == nil {
			next, err = openBeneath(cur, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func (r *Root) dirMode() uint32 {
	if r.ReadOnly {
		return 0o555
	}
	return 0o755
}

func (r *Root) fileMode() uint32 {
	if r.ReadOnly {
		return 0o444
	}
	return 0o644
}

// Put writes r to p, creating the folders above it, and replaces a file
// or link already there. More than max bytes is an error of kind Limit.
// The file appears under its name only once complete.
func (fs *FS) Put(p string, src io.Reader, max int64) (Info, error) {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return Info{}, err
	}
	if rel == "." {
		return Info{}, errorf(Invalid, "path %s: is a folder", p)
	}
	if err := checkName(path.Base(rel)); err != nil {
		return Info{}, err
	}
	dir, base, err := r.parent(rel, true)
	if err != nil {
		return Info{}, wrap(err, p)
	}
	defer unix.Close(dir)
	tmp := ".airlock-put-" + randomSuffix()
	fd, err := openBeneath(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return Info{}, wrap(err, p)
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, io.LimitReader(src, max+1))
	if err == nil && n > max {
		err = errorf(Limit, "%s: over the cap of %d bytes", p, max)
	}
	if err == nil {
		err = f.Chown(r.UID, r.GID)
	}
	if err == nil {
		err = f.Chmod(os.FileMode(r.fileMode()))
	}
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, base)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return Info{}, wrap(err, p)
	}
	return info(p, &st, ""), nil
}

// Open opens the regular file p for reading.
func (fs *FS) Open(p string) (*os.File, Info, error) {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return nil, Info{}, err
	}
	fd, err := openBeneath(int(r.Dir.Fd()), rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, Info{}, wrap(err, p)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, Info{}, wrap(err, p)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, Info{}, errorf(Invalid, "%s: not a regular file", p)
	}
	// Back to blocking reads: the descriptor is read by a copy loop.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, Info{}, wrap(err, p)
	}
	return os.NewFile(uintptr(fd), p), info(p, &st, ""), nil
}

// Stat describes p without following a link in its last name.
func (fs *FS) Stat(p string) (Info, error) {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return Info{}, err
	}
	if rel == "." {
		var st unix.Stat_t
		if err := unix.Fstat(int(r.Dir.Fd()), &st); err != nil {
			return Info{}, wrap(err, p)
		}
		return info(p, &st, ""), nil
	}
	dir, base, err := r.parent(rel, false)
	if err != nil {
		return Info{}, wrap(err, p)
	}
	defer unix.Close(dir)
	return statAt(dir, base, p)
}

func statAt(dir int, name, p string) (Info, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, wrap(err, p)
	}
	target := ""
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, maxPath)
		if n, err := unix.Readlinkat(dir, name, buf); err == nil {
			target = string(buf[:n])
		}
	}
	return info(p, &st, target), nil
}

// List describes the entries of folder p, sorted by name.
func (fs *FS) List(p string) ([]Info, error) {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return nil, err
	}
	fd, err := openBeneath(int(r.Dir.Fd()), rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, wrap(err, p)
	}
	d := os.NewFile(uintptr(fd), p)
	defer d.Close()
	names, err := d.Readdirnames(maxEntries)
	if err != nil && err != io.EOF {
		return nil, wrap(err, p)
	}
	sort.Strings(names)
	out := make([]Info, 0, len(names))
	for _, n := range names {
		in, err := statAt(fd, n, path.Join(p, n))
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, in)
	}
	return out, nil
}

// Mkdir makes folder p and the folders above it.
func (fs *FS) Mkdir(p string) error {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return err
	}
	fd, err := r.mkdirAll(rel)
	if err != nil {
		return wrap(err, p)
	}
	unix.Close(fd)
	return nil
}

// Remove removes p: a file, a link (not what it points to), or a folder
// with everything in it. A root cannot be removed.
func (fs *FS) Remove(p string) error {
	r, rel, err := fs.resolve(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return errorf(Invalid, "%s: cannot remove a top folder", p)
	}
	dir, base, err := r.parent(rel, false)
	if err != nil {
		return wrap(err, p)
	}
	defer unix.Close(dir)
	return wrap(removeAt(dir, base, 0), p)
}

// removeAt removes name beneath dir, emptying a folder first.
func removeAt(dir int, name string, depth int) error {
	err := unix.Unlinkat(dir, name, 0)
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	if depth >= maxDepth {
		return errorf(Limit, "folders nested deeper than %d", maxDepth)
	}
	fd, err := openBeneath(dir, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		names, rerr := d.Readdirnames(1024)
		for _, n := range names {
			if err := removeAt(fd, n, depth+1); err != nil && !errors.Is(err, unix.ENOENT) {
				d.Close()
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	d.Close()
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

// Rename moves from to to; both must lie in one root.
func (fs *FS) Rename(from, to string) error {
	rf, relFrom, err := fs.resolve(from)
	if err != nil {
		return err
	}
	rt, relTo, err := fs.resolve(to)
	if err != nil {
		return err
	}
	if rf != rt {
		return errorf(Invalid, "rename %s to %s: across top folders", from, to)
	}
	if relFrom == "." || relTo == "." {
		return errorf(Invalid, "rename %s to %s: cannot move a top folder", from, to)
	}
	if err := checkName(path.Base(relTo)); err != nil {
		return err
	}
	fd, fbase, err := rf.parent(relFrom, false)
	if err != nil {
		return wrap(err, from)
	}
	defer unix.Close(fd)
	td, tbase, err := rt.parent(relTo, true)
	if err != nil {
		return wrap(err, to)
	}
	defer unix.Close(td)
	err = unix.Renameat2(fd, fbase, td, tbase, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL {
		err = renameNoReplace(fd, fbase, td, tbase)
	}
	return wrap(err, to)
}

// renameNoReplace renames without RENAME_NOREPLACE, for a file system
// that refuses the flag with EINVAL (gVisor's gofer mounts, which the
// kubernetes backend's agent works in). A file is linked to its new name,
// which fails if that name exists, then unlinked from its old one; a
// folder, which cannot be linked, is renamed once its new name is seen
// to be free (only the sandbox's own processes could take it in between).
func renameNoReplace(fd int, fbase string, td int, tbase string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, fbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Linkat(fd, fbase, td, tbase, 0); err != nil {
			return err
		}
		return unix.Unlinkat(fd, fbase, 0)
	}
	switch err := unix.Fstatat(td, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err {
	case nil:
		return unix.EEXIST
	case unix.ENOENT:
		return unix.Renameat(fd, fbase, td, tbase)
	default:
		return err
	}
}

// checkName refuses names that would confuse a terminal or a listing.
func checkName(name string) error {
	if len(name) > 255 {
		return errorf(Invalid, "name %.40q…: longer than 255 bytes", name)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return errorf(Invalid, "name %q: contains a control character", name)
		}
	}
	return nil
}

func info(p string, st *unix.Stat_t, target string) Info {
	return Info{
		Path:    p,
		Name:    path.Base(p),
		Size:    st.Size,
		Mode:    uint32(ModeOf(st.Mode)),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		Target:  target,
	}
}

// ModeOf turns a stat mode into an fs.FileMode's bits.
func ModeOf(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= os.ModeDir
	case unix.S_IFLNK:
		mode |= os.ModeSymlink
	case unix.S_IFIFO:
		mode |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= os.ModeSocket
	case unix.S_IFCHR:
		mode |= os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		mode |= os.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
