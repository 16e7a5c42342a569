package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sync/errgroup"
)

// TreeSum is the outcome of a canonical walk of a root file system.
type TreeSum struct {
	// Digest is "sha256:" followed by the hex SHA-256 of the walk's records.
	Digest string
	// SizeBytes adds up regular file and symlink sizes, each hard-linked
	// file once.
	SizeBytes int64
	// Files counts the entries walked, folders included.
	Files int
}

// Sum walks root in lexical order without following links and hashes one
// record per entry:
//
//	PATH \0 TYPE \0 MODE \0 UID \0 GID \0 SIZE \0 CONTENT \0 TARGET \n
//
// PATH is absolute inside the image ("/" for root itself); TYPE is one of
// d f l c b p s; MODE is the permission bits with setuid, setgid and sticky,
// in octal; SIZE is the byte count of a file or of a link's target; CONTENT
// is the hex SHA-256 of a regular file's bytes; TARGET is a symlink's
// target. Empty fields stay empty. Times are left out, so two builds of the
// same packages and files give the same digest.
//
// The files' contents are read sumReaders at a time, each inode once: a
// root whose files are not in the page cache is bound by the disk's
// latency more than by its throughput (BenchmarkSumUncached).
func Sum(ctx context.Context, root string) (TreeSum, error) {
	return sum(ctx, root, sumReaders)
}

// sum is Sum with readers files read at a time.
func sum(ctx context.Context, root string, readers int) (TreeSum, error) {
	entries, err := walkTree(ctx, root)
	if err != nil {
		return TreeSum{}, fmt.Errorf("digest %s: %w", root, err)
	}
	if err := hashContents(ctx, entries, readers); err != nil {
		return TreeSum{}, fmt.Errorf("digest %s: %w", root, err)
	}
	var out TreeSum
	h := sha256.New()
	for _, e := range entries {
		writeRecord(h, e)
		out.Files++
		if e.same == nil {
			out.SizeBytes += e.size
		}
	}
	out.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return out, nil
}

// sumReaders is how many files Sum reads at once.
const sumReaders = 8

// treeEntry is one entry of a walk and what its record needs.
type treeEntry struct {
	hostPath, imagePath string
	fi                  fs.FileInfo
	// size is a file's byte count or a link's target length.
	size int64
	// content is a regular file's hex SHA-256; target a link's target.
	content, target string
	// same is the entry of the walk's first name of this inode, for an
	// entry seen before under another name (its size is counted once);
	// nil otherwise.
	same *treeEntry
}

// walkTree lists root's entries in lexical order, with link targets and
// sizes; contents are left to hashContents.
func walkTree(ctx context.Context, root string) ([]*treeEntry, error) {
	var entries []*treeEntry
	first := map[[2]uint64]*treeEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := &treeEntry{hostPath: p, imagePath: imagePath(root, p), fi: fi}
		switch fi.Mode().Type() {
		case 0:
			e.size = fi.Size()
		case fs.ModeSymlink:
			if e.target, err = os.Readlink(p); err != nil {
				return err
			}
			e.size = int64(len(e.target))
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Nlink > 1 && !fi.IsDir() {
			key := [2]uint64{st.Dev, st.Ino}
			if f := first[key]; f != nil {
				e.same = f
			} else {
				first[key] = e
			}
		}
		entries = append(entries, e)
		return nil
	})
	return entries, err
}

// hashContents fills in the content of every regular file, reading each
// inode once, readers at a time.
func hashContents(ctx context.Context, entries []*treeEntry, readers int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(readers)
	for _, e := range entries {
		if !e.fi.Mode().IsRegular() || e.same != nil {
			continue
		}
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			sha, err := fileSHA256(e.hostPath)
			e.content = sha
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, e := range entries {
		if e.same != nil {
			e.content = e.same.content
		}
	}
	return nil
}

// writeRecord writes the record of one entry.
func writeRecord(h hash.Hash, e *treeEntry) {
	st := e.fi.Sys().(*syscall.Stat_t)
	fmt.Fprintf(h, "%s\x00%c\x00%04o\x00%d\x00%d\x00%d\x00%s\x00%s\n",
		e.imagePath, typeLetter(e.fi.Mode()), st.Mode&0o7777, st.Uid, st.Gid, e.size, e.content, e.target)
}

// imagePath turns a host path under root into the absolute path the
// image's programs see.
func imagePath(root, hostPath string) string {
	rel, err := filepath.Rel(root, hostPath)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(rel)
}

func typeLetter(m fs.FileMode) byte {
	switch m.Type() {
	case fs.ModeDir:
		return 'd'
	case fs.ModeSymlink:
		return 'l'
	case fs.ModeDevice | fs.ModeCharDevice:
		return 'c'
	case fs.ModeDevice:
		return 'b'
	case fs.ModeNamedPipe:
		return 'p'
	case fs.ModeSocket:
		return 's'
	}
	return 'f'
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
