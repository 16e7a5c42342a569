package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Names inside a store folder. Entries starting with a dot are never images.
const (
	manifestFile = "manifest.json"
	rootfsDir    = "rootfs"
	lockFile     = ".lock"
	buildPrefix  = ".build-"
	trashPrefix  = ".trash-"
)

// errLocked means another live process holds a lock.
var errLocked = errors.New("locked by another process")

// Store is a folder of built images, one sub-folder per image.
type Store struct {
	dir string
}

// Lookup finds built images by name; *Store is one. Backends take it to
// resolve the image of a sandbox.
type Lookup interface {
	Get(name string) (*Image, error)
}

// Image is one built image in a store.
type Image struct {
	// Name is the image's name, the name of its folder in the store.
	Name string `json:"name"`
	// Dir is the image's folder; it holds rootfs/ and manifest.json.
	Dir string `json:"dir"`
	// Manifest describes what the image holds.
	Manifest Manifest `json:"manifest"`
}

// RootFS is the folder the sandboxes use, read-only, as their root.
func (i *Image) RootFS() string { return filepath.Join(i.Dir, rootfsDir) }

// Manifest records how an image was built and what it holds. It is written
// last: an image folder without one is never listed.
type Manifest struct {
	Name  string    `json:"name"`
	Built time.Time `json:"built"`
	// BuildSeconds is how long the build took.
	BuildSeconds float64 `json:"build_seconds"`
	Suite        string  `json:"suite"`
	Arch         string  `json:"arch"`
	// Digest is "sha256:" and the hex digest of the canonical walk of the
	// root file system (see Sum).
	Digest string `json:"digest"`
	// SizeBytes adds up the sizes of the regular files and links, each
	// hard-linked file once.
	SizeBytes int64 `json:"size_bytes"`
	Files     int   `json:"files"`
	// Packages are the Debian packages installed, as dpkg recorded them
	// before dpkg itself was removed.
	Packages []Package `json:"packages"`
	// NPMPackages are the npm packages installed under /usr/local.
	NPMPackages []Package `json:"npm_packages,omitempty"`
	// Env is the environment programs in the image start with.
	Env map[string]string `json:"env"`
	// User is "uid:gid" of the unprivileged account the image provides.
	User string `json:"user"`
	// Definition is the definition the image was built from.
	Definition Definition `json:"definition"`
}

// Package is one installed package and its version.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// OpenStore opens the store in dir. The folder is created by the first
// build; a store without it is empty.
func OpenStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("image store folder is empty: %w", sandbox.ErrInvalid)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &Store{dir: abs}, nil
}

// Dir is the store's folder.
func (s *Store) Dir() string { return s.dir }

// DefaultDir is where images live unless told otherwise:
// $AIRLOCK_HOME/images when AIRLOCK_HOME is set, else
// $XDG_DATA_HOME/airlock/images, else ~/.local/share/airlock/images.
// getenv is os.Getenv or a stand-in for it.
func DefaultDir(getenv func(string) string) (string, error) {
	if h := getenv("AIRLOCK_HOME"); h != "" {
		return filepath.Join(h, "images"), nil
	}
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "airlock", "images"), nil
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "share", "airlock", "images"), nil
	}
	return "", fmt.Errorf("none of AIRLOCK_HOME, XDG_DATA_HOME and HOME is set: %w", sandbox.ErrUnsupported)
}

// Get returns the named image. It reads only the manifest, so it is cheap.
// An image that is not there gives an error wrapping sandbox.ErrNotFound.
func (s *Store) Get(name string) (*Image, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, name)
	data, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image %q in %s: %w", name, s.dir, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	img := &Image{Name: name, Dir: dir}
	if err := json.Unmarshal(data, &img.Manifest); err != nil {
		return nil, fmt.Errorf("image %q: manifest: %w", name, err)
	}
	return img, nil
}

// List returns the store's images sorted by name.
func (s *Store) List() ([]*Image, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var imgs []*Image
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		img, err := s.Get(e.Name())
		if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrInvalid) {
			continue
		}
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].Name < imgs[j].Name })
	return imgs, nil
}

// Remove deletes the named image. The image disappears from the store at
// once (it is renamed away under the store lock) and its files are deleted
// after; an interrupted removal is finished by the next build.
func (s *Store) Remove(name string) error {
	if _, err := s.Get(name); err != nil {
		return err // checked before locking, so that no lock file is made in vain
	}
	var trash *scratch
	err := s.withLock(func() error {
		if _, err := s.Get(name); err != nil {
			return err
		}
		var err error
		trash, err = s.retire(name)
		return err
	})
	if err != nil {
		return err
	}
	return trash.remove()
}

// retire moves an image folder into a fresh locked scratch folder, from
// where it is deleted. The store lock must be held.
func (s *Store) retire(name string) (*scratch, error) {
	tmp, err := s.newScratch(trashPrefix, name)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(filepath.Join(s.dir, name), filepath.Join(tmp.dir, name)); err != nil {
		tmp.remove()
		return nil, fmt.Errorf("remove image %q: %w", name, err)
	}
	return tmp, nil
}

// scratch is a temporary folder in the store that is locked while in use,
// so that cleanLeftovers can tell the live ones from the abandoned ones.
type scratch struct {
	dir  string
	lock *os.File
}

// newScratch makes and locks a fresh scratch folder. The store lock must
// be held, so that no cleaner sees the folder before it is locked.
func (s *Store) newScratch(prefix, name string) (*scratch, error) {
	dir, err := os.MkdirTemp(s.dir, prefix+name+"-")
	if err != nil {
		return nil, err
	}
	f, err := lockDir(dir, false)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &scratch{dir: dir, lock: f}, nil
}

// remove deletes the scratch folder and releases its lock.
func (t *scratch) remove() error {
	err := os.RemoveAll(t.dir)
	t.lock.Close()
	return err
}

// withLock runs fn while holding the store-wide lock, which guards the
// short steps that create, rename and clean folders in the store.
func (s *Store) withLock(fn func() error) error {
	f, err := lockFileAt(filepath.Join(s.dir, lockFile))
	if err != nil {
		return fmt.Errorf("lock image store: %w", err)
	}
	defer f.Close()
	return fn()
}

// cleanLeftovers deletes the scratch folders of builds and removals that
// were killed: those that no live process holds locked. The store lock must
// be held. It returns how many it deleted.
func (s *Store) cleanLeftovers() (int, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || !(strings.HasPrefix(e.Name(), buildPrefix) || strings.HasPrefix(e.Name(), trashPrefix)) {
			continue
		}
		dir := filepath.Join(s.dir, e.Name())
		f, err := lockDir(dir, true)
		if errors.Is(err, errLocked) {
			continue
		}
		if err != nil {
			return n, err
		}
		if err := (&scratch{dir: dir, lock: f}).remove(); err != nil {
			return n, fmt.Errorf("clean leftover %s: %w", e.Name(), err)
		}
		n++
	}
	return n, nil
}

// FormatSize prints a byte count in binary units, such as "612.4 MiB".
func FormatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
