package artifact

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// tarTypeReason is, as typeReason for a folder's entries, why an entry
// of a stream cannot pass: all but folders and regular files of one link.
func tarTypeReason(h *tar.Header) string {
	if sparse(h) {
		return "sparse file: its holes are zeros the archive does not carry"
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return ""
	case tar.TypeReg:
		if n := h.PAXRecords[sandbox.PAXLinks]; n != "" && n != "1" {
			return fmt.Sprintf("hard link (%s names for one file)", n)
		}
		return ""
	case tar.TypeLink:
		return "hard link (a second name for " + h.Linkname + ")"
	case tar.TypeSymlink:
		return "symbolic link (not followed)"
	case tar.TypeFifo:
		if h.PAXRecords[sandbox.PAXType] == "socket" {
			return "socket"
		}
		return "FIFO (named pipe)"
	case tar.TypeChar, tar.TypeBlock:
		return "device node"
	}
	return fmt.Sprintf("entry of tar type %q: only folders and regular files leave", h.Typeflag)
}

// sparse tells whether the entry's bytes come as a sparse map (GNU's 'S'
// type, or GNU.sparse records in PAX), whose holes the tar reader fills
// with zeros: a few hundred bytes of stream could stand for a file the
// size of the cap, to be read and written on the host. No backend writes
// one: the folders an output archive comes from have none.
func sparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// CollectTar gives every entry of a tar stream a verdict, with the rules
// CollectTo applies to a folder: for a backend that hands out its
// /workspace/output as an archive rather than a host folder. Only folders
// and regular files can pass, never sparse ones; links, devices, FIFOs
// and every other entry type are rejected, as are names that are
// absolute, unclean or climb with "..", names given twice, and anything
// past the caps, which the headers' sizes are checked against before a
// byte is read. A stream that ends badly is reported as a rejected
// entry, and the walk stops there.
func CollectTar(ctx context.Context, src io.Reader, dst Destination, p sandbox.ArtifactPolicy) ([]sandbox.Artifact, error) {
	w, err := newWalker(dst, p)
	if err != nil {
		return nil, err
	}
	defer w.close()
	tr := tar.NewReader(src)
	seen := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			w.refuse(".", 0, "the archive is malformed: "+err.Error())
			break
		}
		if w.entries >= w.c.p.MaxFiles {
			w.refuse(h.Name, 0, fmt.Sprintf("more than %d entries (folders count); the walk stopped here and later entries were not examined", w.c.p.MaxFiles))
			break
		}
		w.entries++
		if err := w.tarEntry(ctx, tr, h, seen); err != nil {
			return nil, err
		}
	}
	return w.sorted(), nil
}

// tarEntry judges one entry of the stream.
func (w *walker) tarEntry(ctx context.Context, tr *tar.Reader, h *tar.Header, seen map[string]bool) error {
	rel := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
	switch {
	case rel == "" || rel == ".":
		return nil // the folder itself
	case path.Clean(rel) != rel || strings.HasPrefix(rel, "../") || rel == "..":
		w.refuse(h.Name, h.Size, "entry name is not a clean path beneath the folder")
		return nil
	case seen[rel]:
		w.refuse(rel, h.Size, "entry appears twice in the archive")
		return nil
	}
	seen[rel] = true
	if why := checkPath(rel, w.c.p.MaxDepth, w.c.p.MaxPathLen); why != "" {
		w.refuse(rel, h.Size, why)
		return nil
	}
	if why := w.c.checkHidden(rel); why != "" {
		w.refuse(rel, h.Size, why)
		return nil
	}
	if why := tarTypeReason(h); why != "" {
		w.refuse(rel, h.Size, why)
		return nil
	}
	if h.Typeflag == tar.TypeDir {
		// as CollectTo refuses a folder that files would be too deep in
		if depth := strings.Count(rel, "/") + 1; depth >= w.c.p.MaxDepth {
			w.refuse(rel, 0, fmt.Sprintf("folder at depth %d: files in it would pass the depth cap of %d", depth, w.c.p.MaxDepth))
		}
		return nil
	}
	if !w.fileFits(rel, path.Base(rel), h.Size) {
		return nil
	}
	return w.content(ctx, rel, io.LimitReader(tr, h.Size), h.Size)
}
