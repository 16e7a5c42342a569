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
func Sum(ctx context.Context, root string) (TreeSum, error) {
	var sum TreeSum
	h := sha256.New()
	seen := map[[2]uint64]bool{}
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
		size, err := writeRecord(h, p, imagePath(root, p), fi)
		if err != nil {
			return err
		}
		sum.Files++
		if st := fi.Sys().(*syscall.Stat_t); st.Nlink > 1 && !fi.IsDir() {
			key := [2]uint64{st.Dev, st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		sum.SizeBytes += size
		return nil
	})
	if err != nil {
		return TreeSum{}, fmt.Errorf("digest %s: %w", root, err)
	}
	sum.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return sum, nil
}

// writeRecord writes the record of one entry and returns its size.
func writeRecord(h hash.Hash, hostPath, imagePath string, fi fs.FileInfo) (int64, error) {
	var size int64
	var content, target string
	switch fi.Mode().Type() {
	case 0:
		sha, err := fileSHA256(hostPath)
		if err != nil {
			return 0, err
		}
		size, content = fi.Size(), sha
	case fs.ModeSymlink:
		t, err := os.Readlink(hostPath)
		if err != nil {
			return 0, err
		}
		size, target = int64(len(t)), t
	}
	st := fi.Sys().(*syscall.Stat_t)
	fmt.Fprintf(h, "%s\x00%c\x00%04o\x00%d\x00%d\x00%d\x00%s\x00%s\n",
		imagePath, typeLetter(fi.Mode()), st.Mode&0o7777, st.Uid, st.Gid, size, content, target)
	return size, nil
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
