package artifact

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// CollectTo walks the folder src (an open directory, typically a
// sandbox's /workspace/output, possibly still being written) and gives
// every entry a verdict. Accepted and sanitized files are written beneath
// dst.Dir, which is created if missing; an empty dst.Dir decides only and
// writes nothing. Rejected files never reach dst.Dir under their name: a
// file is written unnamed (O_TMPFILE; on file systems without it, under a
// hidden temporary name that is removed) and linked into place only once
// accepted. An entry of the same name in dst.Dir is kept and the artifact
// rejected, unless dst.Overwrite is set; a symbolic link in dst.Dir is
// never followed.
//
// Entries are opened relative to src with openat2, never by path strings,
// and no link is followed (see the package doc for all rules). Folders are
// not reported unless refused. The result is sorted by path.
//
// CollectTo returns an error only for failures on the host side (dst.Dir
// cannot be created or written, descriptors run out) or when ctx ends; a
// hostile tree yields verdicts.
func CollectTo(ctx context.Context, src *os.File, dst Destination, p sandbox.ArtifactPolicy) ([]sandbox.Artifact, error) {
	root, err := openRoot(src)
	if err != nil {
		return nil, err
	}
	w, err := newWalker(dst, p)
	if err != nil {
		unix.Close(root)
		return nil, err
	}
	defer w.close()
	if err := w.walkDir(ctx, os.NewFile(uintptr(root), "."), "", 0); err != nil {
		return nil, err
	}
	return w.sorted(), nil
}

// newWalker readies a walk that writes to dst (or only decides, with
// dst.Dir empty) under policy p; close releases it.
func newWalker(dst Destination, p sandbox.ArtifactPolicy) (*walker, error) {
	w := &walker{c: newChecker(Normalize(p))}
	var err error
	if dst.Dir != "" {
		w.dst, err = openDest(dst.Dir, dst.Overwrite)
	} else {
		w.spool, err = newSpool()
	}
	return w, err
}

// close releases the destination or the spool file.
func (w *walker) close() {
	if w.dst != nil {
		w.dst.close()
	}
	if w.spool != nil {
		w.spool.Close()
	}
}

// sorted returns the verdicts sorted by path.
func (w *walker) sorted() []sandbox.Artifact {
	slices.SortFunc(w.out, func(a, b sandbox.Artifact) int { return strings.Compare(a.Path, b.Path) })
	return w.out
}

// openRoot opens the folder anew, so that reading its entries does not
// move the offset of the caller's descriptor.
func openRoot(src *os.File) (int, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("output folder: %w", err)
	}
	fd, oerr := -1, error(nil)
	if err := rc.Control(func(sfd uintptr) {
		fd, oerr = openat2(int(sfd), ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, srcResolve)
	}); err != nil {
		return -1, fmt.Errorf("output folder: %w", err)
	}
	if oerr != nil {
		return -1, fmt.Errorf("open output folder: %w", oerr)
	}
	return fd, nil
}

// newSpool makes an unlinked temporary file that holds each file's output
// while Collect only decides.
func newSpool() (*os.File, error) {
	f, err := os.CreateTemp("", "airlock-artifact-*")
	if err != nil {
		return nil, fmt.Errorf("spool file: %w", err)
	}
	os.Remove(f.Name())
	return f, nil
}

// walker holds the state of one Collect.
type walker struct {
	c       *checker
	dst     *dest    // nil when deciding only
	spool   *os.File // the output of each file when deciding only
	entries int      // entries examined, folders included
	total   int64    // bytes read from files
	full    bool     // the entry cap was reached; the walk is over
	out     []sandbox.Artifact
}

// refuse records a rejected entry.
func (w *walker) refuse(rel string, size int64, why string) {
	w.out = append(w.out, reject(sandbox.Artifact{Path: displayPath(rel), Size: size}, why))
}

// walkDir examines the entries of one folder in name order and closes it.
func (w *walker) walkDir(ctx context.Context, dir *os.File, rel string, depth int) error {
	defer dir.Close()
	dirfd := int(dir.Fd())
	names, err := w.firstNames(dir)
	if err != nil {
		w.refuse(rel, 0, "folder cannot be read: "+err.Error())
		return nil
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.full {
			return nil
		}
		relPath := path.Join(rel, name)
		if w.entries >= w.c.p.MaxFiles {
			w.full = true
			w.refuse(relPath, 0, fmt.Sprintf("more than %d entries (folders count); the walk stopped here and later entries were not examined", w.c.p.MaxFiles))
			return nil
		}
		w.entries++
		if err := w.visit(ctx, dirfd, relPath, name, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// firstNames lists a folder and returns, sorted, the names that the entry
// cap leaves room for, plus one to tell that the cap was reached: the same
// names whatever order the file system lists them in, in memory bounded by
// the cap however many entries the folder has.
func (w *walker) firstNames(dir *os.File) ([]string, error) {
	keep := max(w.c.p.MaxFiles-w.entries, 0) + 1
	var names []string
	for {
		batch, err := dir.Readdirnames(1024)
		names = append(names, batch...)
		if len(names) > 2*keep+1024 || err != nil {
			slices.Sort(names)
			names = names[:min(len(names), keep)]
		}
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// visit examines one entry at the given depth (its number of components).
func (w *walker) visit(ctx context.Context, dirfd int, rel, name string, depth int) error {
	if why := checkName(name); why != "" {
		w.refuse(rel, 0, why)
		return nil
	}
	if why := w.c.checkHidden(name); why != "" {
		w.refuse(rel, 0, why)
		return nil
	}
	if len(rel) > w.c.p.MaxPathLen {
		w.refuse(rel, 0, fmt.Sprintf("path is %d bytes long, over the cap of %d", len(rel), w.c.p.MaxPathLen))
		return nil
	}
	st, why, err := inspect(dirfd, name)
	if err != nil || why != "" {
		w.refuse(rel, st.Size, why)
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return w.visitDir(ctx, dirfd, rel, name, depth, &st)
	}
	return w.visitFile(ctx, dirfd, rel, name, &st)
}

// visitDir descends into a folder unless files in it would be too deep.
func (w *walker) visitDir(ctx context.Context, dirfd int, rel, name string, depth int, st *unix.Stat_t) error {
	if depth >= w.c.p.MaxDepth {
		w.refuse(rel, 0, fmt.Sprintf("folder at depth %d: files in it would pass the depth cap of %d", depth, w.c.p.MaxDepth))
		return nil
	}
	dir, why, err := reopen(dirfd, name, st)
	if err != nil || why != "" {
		w.refuse(rel, 0, why)
		return err
	}
	return w.walkDir(ctx, dir, rel, depth)
}

// visitFile checks a regular file against the caps, then its content.
func (w *walker) visitFile(ctx context.Context, dirfd int, rel, name string, st *unix.Stat_t) error {
	if !w.fileFits(rel, name, st.Size) {
		return nil
	}
	f, why, err := reopen(dirfd, name, st)
	if err != nil || why != "" {
		w.refuse(rel, st.Size, why)
		return err
	}
	defer f.Close()
	return w.content(ctx, rel, f, st.Size)
}

// fileFits checks a file's claimed size against the caps and its name
// against the extension allowlist, and refuses it when it fails either.
func (w *walker) fileFits(rel, name string, size int64) bool {
	p := w.c.p
	left := p.MaxTotalBytes - w.total
	why := ""
	switch {
	case size > p.MaxFileBytes:
		why = fmt.Sprintf("file is %d bytes, over the cap of %d per file", size, p.MaxFileBytes)
	case size > left:
		why = fmt.Sprintf("file is %d bytes and would pass the cap of %d bytes in total", size, p.MaxTotalBytes)
	default:
		why = w.c.checkExt(name)
	}
	if why != "" {
		w.refuse(rel, size, why)
		return false
	}
	return true
}

// content runs the content rules on one file's bytes, counting what is
// read against the total cap.
func (w *walker) content(ctx context.Context, rel string, r io.Reader, size int64) error {
	p := w.c.p
	in := &countReader{r: r}
	a, err := w.decide(ctx, rel, in, size, min(p.MaxFileBytes, p.MaxTotalBytes-w.total))
	w.total += in.n
	if err != nil {
		return err
	}
	w.out = append(w.out, a)
	return nil
}

// decide runs the content rules on one open file and, when there is a
// host folder, writes the result there if it is not rejected.
func (w *walker) decide(ctx context.Context, rel string, in io.Reader, size, limit int64) (sandbox.Artifact, error) {
	if w.dst == nil {
		if err := w.spool.Truncate(0); err != nil {
			return sandbox.Artifact{}, fmt.Errorf("spool file: %w", err)
		}
		if _, err := w.spool.Seek(0, io.SeekStart); err != nil {
			return sandbox.Artifact{}, fmt.Errorf("spool file: %w", err)
		}
		return w.c.check(ctx, rel, in, size, limit, w.spool)
	}
	s, err := w.dst.create(rel)
	if err != nil {
		return sandbox.Artifact{}, err
	}
	a, err := w.c.check(ctx, rel, in, size, limit, s.f)
	if err != nil || a.Verdict == sandbox.VerdictRejected {
		s.abort()
		return a, err
	}
	why, err := s.commit()
	if why != "" {
		a.Size, a.ServeHint = size, ""
		a = reject(a, why)
	}
	return a, err
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

// Read implements io.Reader.
func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
