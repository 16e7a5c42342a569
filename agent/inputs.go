package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/tools"
)

// Input is a host file put read-only at /workspace/input/NAME.
type Input struct {
	Path, Name string
}

// InputInfo describes an input in the transcript.
type InputInfo struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// putInputs copies the inputs into the sandbox and describes them.
func putInputs(ctx context.Context, sb tools.Sandbox, inputs []Input) ([]InputInfo, error) {
	var out []InputInfo
	for _, in := range inputs {
		abs, err := filepath.Abs(in.Path)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(abs)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Path, err)
		}
		h := sha256.New()
		info, err := sb.Put(ctx, tools.InputDir+"/"+in.Name, io.TeeReader(f, h), 0)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		out = append(out, InputInfo{Name: in.Name, Path: abs, Size: info.Size, SHA256: hex.EncodeToString(h.Sum(nil))})
	}
	return out, nil
}

// previewScript prints, for each file named, its size and first rows: the
// sheets of a workbook (openpyxl, read-only), the first lines of text.
// It runs inside the sandbox, so that an untrusted file is parsed there.
const previewScript = `
import os, sys
def text_preview(p):
    with open(p, 'rb') as f:
        head = f.read(4096)
        if b'\0' in head:
            print('  binary')
            return
        lines = 0
        f.seek(0)
        for block in iter(lambda: f.read(1 << 20), b''):
            lines += block.count(b'\n')
            if f.tell() > (256 << 20):
                lines = None
                break
    if lines is not None:
        print('  %d lines; the first:' % lines)
    for line in head.decode('utf-8', 'replace').splitlines()[:6]:
        print('    ' + line[:300])
for name in sys.argv[1:]:
    p = os.path.join('/workspace/input', name)
    print('- %s (%d bytes)' % (name, os.path.getsize(p)))
    try:
        if name.lower().endswith(('.xlsx', '.xlsm')):
            import openpyxl
            wb = openpyxl.load_workbook(p, read_only=True, data_only=True)
            for ws in wb.worksheets:
                print('  sheet %r: %s rows x %s columns; the first rows:' % (ws.title, ws.max_row, ws.max_column))
                for i, row in enumerate(ws.iter_rows(values_only=True)):
                    if i >= 5:
                        break
                    print('    ' + ' | '.join('' if v is None else str(v)[:40] for v in row[:24]))
        else:
            text_preview(p)
    except Exception as e:
        print('  (could not be read: %s: %s)' % (type(e).__name__, str(e)[:200]))
`

// maxPreview bounds the preview of all inputs together.
const maxPreview = 8 << 10

// preview has the sandbox read the inputs' first rows.
func preview(ctx context.Context, sb tools.Sandbox, inputs []InputInfo) (string, time.Duration, error) {
	if len(inputs) == 0 {
		return "", 0, nil
	}
	cmd := []string{"python3", "-c", previewScript}
	for _, in := range inputs {
		cmd = append(cmd, in.Name)
	}
	start := time.Now()
	res, err := sb.Exec(ctx, cmd, 60*time.Second)
	took := time.Since(start)
	if err != nil {
		return "", took, err
	}
	if res.ExitCode != 0 {
		// No python3 in the image: names and sizes, and the first lines.
		var b strings.Builder
		for _, in := range inputs {
			fmt.Fprintf(&b, "- %s (%d bytes)\n", in.Name, in.Size)
			r, err := sb.Exec(ctx, []string{"head", "-c", "600", tools.InputDir + "/" + in.Name}, 10*time.Second)
			if err == nil && r.ExitCode == 0 && !strings.ContainsRune(r.Stdout, 0) {
				for _, l := range strings.Split(strings.ToValidUTF8(r.Stdout, "�"), "\n") {
					fmt.Fprintf(&b, "    %s\n", l)
				}
			}
		}
		return tools.Clip(b.String(), maxPreview), time.Since(start), nil
	}
	return tools.Clip(strings.ToValidUTF8(res.Stdout, "�"), maxPreview), took, nil
}
