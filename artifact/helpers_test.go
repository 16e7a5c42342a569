package artifact

import (
	"bytes"
	"errors"
	"io"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// testPolicy is the default policy; tests change fields of it.
func testPolicy() sandbox.ArtifactPolicy { return Normalize(sandbox.ArtifactPolicy{}) }

// memOutput is an Output in memory.
type memOutput struct{ bytes.Buffer }

// ReadAt implements io.ReaderAt.
func (m *memOutput) ReadAt(p []byte, off int64) (int, error) {
	b := m.Bytes()
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
