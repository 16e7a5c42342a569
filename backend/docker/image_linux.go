package docker

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
	dimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// imageCache remembers which images the daemon has and the digests of
// folder images, so that each is imported, and each folder hashed, once
// per Backend.
type imageCache struct {
	mu      sync.Mutex
	ready   map[string]bool        // image references the daemon holds
	digests map[string]string      // folder -> content digest
	locks   map[string]*sync.Mutex // one import at a time per reference
}

// source is an image to import: its root file system and content
// digest.
type source struct {
	rootfs, digest string
}

// ref is the reference the image is tagged with: the first 12 hex digits
// of its digest, so that the same content, named or as a folder, is
// imported once.
func (s source) ref() string {
	hex := strings.TrimPrefix(s.digest, "sha256:")
	return "airlock/rootfs:" + hex[:min(12, len(hex))]
}

// image makes sure the daemon holds the image and returns its reference.
// A built image carries its digest; a folder is hashed, once per Backend.
func (b *Backend) image(ctx context.Context, cli *client.Client, img sandbox.Image) (string, error) {
	if img.IsHost() {
		return "", fmt.Errorf("image %q: the docker backend runs built images or folders, not the host's own folders (build one with 'airlock image build python'): %w", img.Name, sandbox.ErrUnsupported)
	}
	src := source{rootfs: img.RootFS, digest: img.Digest}
	if src.digest == "" {
		digest, err := b.images.folderDigest(ctx, img.RootFS)
		if err != nil {
			return "", err
		}
		src.digest = digest
	}
	ref := src.ref()
	unlock := b.images.lock(ref)
	defer unlock()
	if b.images.isReady(ref) {
		return ref, nil
	}
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		b.images.setReady(ref)
		return ref, nil
	} else if !notFound(err) {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	b.opts.Logger.Info("importing image into docker", "image", img.Name, "ref", ref, "rootfs", src.rootfs)
	if err := importImage(ctx, cli, src, ref); err != nil {
		return "", err
	}
	b.images.setReady(ref)
	return ref, nil
}

func (c *imageCache) lock(ref string) func() {
	c.mu.Lock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l := c.locks[ref]
	if l == nil {
		l = &sync.Mutex{}
		c.locks[ref] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (c *imageCache) isReady(ref string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready[ref]
}

func (c *imageCache) setReady(ref string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ready == nil {
		c.ready = map[string]bool{}
	}
	c.ready[ref] = true
}

// folderDigest hashes a folder image once per Backend (image.Sum reads
// every file).
func (c *imageCache) folderDigest(ctx context.Context, dir string) (string, error) {
	c.mu.Lock()
	d, ok := c.digests[dir]
	c.mu.Unlock()
	if ok {
		return d, nil
	}
	sum, err := image.Sum(ctx, dir)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.digests == nil {
		c.digests = map[string]string{}
	}
	c.digests[dir] = sum.Digest
	return sum.Digest, nil
}

// importImage streams the root file system as a tar archive into the
// daemon's import API.
func importImage(ctx context.Context, cli *client.Client, src source, ref string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(ctx, pw, src.rootfs)) }()
	defer pr.Close()
	body, err := cli.ImageImport(ctx, dimage.ImportSource{Source: pr, SourceName: "-"}, ref,
		dimage.ImportOptions{Changes: []string{"LABEL airlock.digest=" + src.digest}})
	if err != nil {
		return fmt.Errorf("import image %s: %w", ref, err)
	}
	defer body.Close()
	if err := readProgress(body); err != nil {
		return fmt.Errorf("import image %s: %w", ref, err)
	}
	return nil
}

// readProgress reads the daemon's JSON progress messages to the end and
// returns the error one of them reports.
func readProgress(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// writeTar writes root's tree as a tar archive: folders, regular files,
// symlinks and hard links, with their owners and modes. Device nodes,
// FIFOs and sockets, which a built image never has, are left out.
func writeTar(ctx context.Context, w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return writeEntry(tw, p, rel, fi, links)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeEntry writes one entry; links maps the inodes of files with
// several names to the first name written.
func writeEntry(tw *tar.Writer, path, rel string, fi fs.FileInfo, links map[[2]uint64]string) error {
	var target string
	switch fi.Mode().Type() {
	case fs.ModeSymlink:
		t, err := os.Readlink(path)
		if err != nil {
			return err
		}
		target = t
	case 0, fs.ModeDir:
	default:
		return nil
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	st := fi.Sys().(*syscall.Stat_t)
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := links[key]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			return tw.WriteHeader(hdr)
		}
		links[key] = hdr.Name
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
