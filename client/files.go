package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// filePath turns a path inside the sandbox into the {path} of the files
// routes: relative to /workspace ("input/data.csv", "output/chart.png"),
// or "tmp/…" for /tmp. Absolute paths under /workspace and /tmp are
// accepted and made relative.
func filePath(id, p string) (string, error) {
	rel := p
	if r, ok := strings.CutPrefix(p, "/workspace/"); ok {
		rel = r
	} else if strings.HasPrefix(p, "/tmp/") || p == "/tmp" {
		rel = p[1:]
	}
	rel = strings.TrimSuffix(rel, "/")
	if rel == "" || strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("file path %q: want a path under /workspace (input/…, output/…) or /tmp: %w", p, ErrInvalid)
	}
	return sessionPath(id, "/files/", rel)
}

// PutFile writes r to path in the session's sandbox and describes the
// file written. A file under input/ is read-only to the code. The call is
// retried after a connection error or a 503 only when r is an io.Seeker
// (a file, a bytes.Reader); an *os.File's size is sent ahead.
func (c *Client) PutFile(ctx context.Context, id, path string, r io.Reader) (sandbox.FileInfo, error) {
	var out sandbox.FileInfo
	p, err := filePath(id, path)
	if err != nil {
		return out, err
	}
	req := &request{method: http.MethodPut, path: p, reader: r, size: -1, contentType: "application/octet-stream", retry: safeRetry}
	switch v := r.(type) {
	case *os.File:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			if off, err := v.Seek(0, io.SeekCurrent); err == nil {
				req.size = st.Size() - off
			}
		}
	case *bytes.Reader:
		req.size = int64(v.Len())
	case *strings.Reader:
		req.size = int64(v.Len())
	}
	err = c.call(ctx, req, nil, &out)
	return out, err
}

// WriteFile writes data to path in the session's sandbox (see PutFile).
func (c *Client) WriteFile(ctx context.Context, id, path string, data []byte) (sandbox.FileInfo, error) {
	return c.PutFile(ctx, id, path, bytes.NewReader(data))
}

// File is a download: the file's bytes as the artifact filter let them
// out (a sanitized file's are rewritten) and its verdict. Close it.
type File struct {
	io.ReadCloser
	// Verdict is "accepted" or "sanitized"; a rejected file is an error
	// (ErrRejected) and never downloads.
	Verdict string
	// Reason says what the filter did to a sanitized file.
	Reason string
	// Size is the length of the body, -1 when the server did not say.
	Size int64
	// Header holds the response's headers (a Content-Security-Policy hint
	// for HTML and SVG among them).
	Header http.Header
}

// GetFile downloads one file through the artifact filter. A file the
// filter rejects is an *api.Error with status 403 (ErrRejected) whose
// message says why; a folder is ErrInvalid (see ListFiles).
func (c *Client) GetFile(ctx context.Context, id, path string) (*File, error) {
	p, err := filePath(id, path)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: p, accept: "application/octet-stream, " + api.ContentJSON, retry: safeRetry})
	if err != nil {
		return nil, err
	}
	if resp.Header.Get(api.HeaderVerdict) == "" {
		resp.Body.Close()
		return nil, fmt.Errorf("airlock GET %s: a folder, not a file (ListFiles lists it): %w", p, ErrInvalid)
	}
	f := &File{ReadCloser: resp.Body, Verdict: resp.Header.Get(api.HeaderVerdict), Reason: resp.Header.Get(api.HeaderReason),
		Size: resp.ContentLength, Header: resp.Header}
	if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil {
		f.Size = n
	}
	return f, nil
}

// ReadFile downloads one file through the artifact filter and returns its
// bytes, up to max (0 means 64 MiB; more is ErrTooLarge), with the
// verdict (see GetFile).
func (c *Client) ReadFile(ctx context.Context, id, path string, max int64) ([]byte, sandbox.Artifact, error) {
	if max <= 0 {
		max = 64 << 20
	}
	f, err := c.GetFile(ctx, id, path)
	if err != nil {
		return nil, sandbox.Artifact{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, sandbox.Artifact{}, fmt.Errorf("airlock: reading %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, sandbox.Artifact{}, fmt.Errorf("airlock: %s is over %d bytes: %w", path, max, ErrTooLarge)
	}
	return b, sandbox.Artifact{Path: path, Size: int64(len(b)), Verdict: f.Verdict, Reason: f.Reason}, nil
}

// ListFiles lists a folder of the sandbox ("output", "tmp/work"), sorted
// by name, with no filter: names, sizes, modes and times.
func (c *Client) ListFiles(ctx context.Context, id, dir string) ([]sandbox.FileInfo, error) {
	p, err := filePath(id, dir)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: p, retry: safeRetry})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.Header.Get(api.HeaderVerdict) != "" {
		return nil, fmt.Errorf("airlock GET %s: a file, not a folder (GetFile downloads it): %w", p, ErrInvalid)
	}
	var out api.FileList
	if err := jsonDecode(resp.Body, &out); err != nil {
		return nil, fmt.Errorf("airlock GET %s: reading the answer: %w", p, err)
	}
	return out.Files, nil
}

// DeleteFile removes a file, or a folder and everything in it.
func (c *Client) DeleteFile(ctx context.Context, id, path string) error {
	p, err := filePath(id, path)
	if err != nil {
		return err
	}
	return c.del(ctx, p)
}
