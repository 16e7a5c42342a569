package artifact

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Placer writes files that were judged elsewhere (by a server's artifact
// filter, say) beneath a host folder with the rules of CollectTo's
// Destination: no link planted in the folder is followed, nothing lands
// above it, and an entry of the same name is kept (the file is not
// placed) unless Overwrite.
type Placer struct {
	d *dest
}

// OpenPlacer creates dst.Dir if needed and opens it. Close it.
func OpenPlacer(dst Destination) (*Placer, error) {
	if dst.Dir == "" {
		return nil, fmt.Errorf("artifact placer: no folder")
	}
	d, err := openDest(dst.Dir, dst.Overwrite)
	if err != nil {
		return nil, err
	}
	return &Placer{d: d}, nil
}

// Place writes r as rel (a clean relative path, such as an Artifact's
// Path) beneath the folder. It returns a reason when the name is taken
// and the file was not placed (the artifact is then to be reported
// rejected with it), and an error when the host failed.
func (p *Placer) Place(rel string, r io.Reader) (string, error) {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("artifact path %q: not a clean relative path", rel)
	}
	s, err := p.d.create(rel)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(s.f, r); err != nil {
		s.abort()
		return "", fmt.Errorf("write %s: %w", rel, err)
	}
	return s.commit()
}

// Save is Place with the signature of the client's SaveFunc: it places
// a server's artifact under its path a.Path.
func (p *Placer) Save(_ context.Context, a sandbox.Artifact, r io.Reader) (string, error) {
	return p.Place(a.Path, r)
}

// Close closes the folders the Placer opened.
func (p *Placer) Close() { p.d.close() }
