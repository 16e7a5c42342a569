package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// transferTimeout bounds how long one upload may take to arrive, or one
// download to leave.
const transferTimeout = 10 * time.Minute

// writtenFile is one entry of an upload's answer.
type writtenFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// fileError writes err as envd's file routes do: 404 for a missing file
// (the SDKs' FileNotFoundError), 507 for a full disk, E2B's JSON body.
func (h *Handler) fileError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, sandbox.ErrLimit) {
		writeError(w, http.StatusInsufficientStorage, clean(err, sandbox.ErrLimit))
		return
	}
	h.fail(w, r, err)
}

// fileCall finds a file request's session and query, and checks its
// user; it answers the request itself when it fails.
func (h *Handler) fileCall(w http.ResponseWriter, r *http.Request) (*session.Session, url.Values, bool) {
	s, err := current(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return nil, nil, false
	}
	q := r.URL.Query()
	if err := userOf(r.Header, q.Get("username")); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return nil, nil, false
	}
	return s, q, true
}

// download answers GET /files?path=P with the file's content as the
// artifact filter passes it: accepted or sanitized bytes, or 403 with the
// filter's reason. Every download goes through the filter, wherever the
// file lies, as it does in airlock's own API.
func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	s, q, ok := h.fileCall(w, r)
	if !ok {
		return
	}
	p := resolve(q.Get("path"))
	fi, err := s.Files().Stat(r.Context(), p)
	if err != nil {
		h.fileError(w, r, err)
		return
	}
	if fi.IsDir() {
		writeError(w, http.StatusBadRequest, p+" is a folder")
		return
	}
	spool, err := os.CreateTemp("", "airlock-e2b-download-*")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	os.Remove(spool.Name())
	defer spool.Close()
	a, err := s.Download(r.Context(), p, spool)
	if err != nil {
		h.fileError(w, r, err)
		return
	}
	w.Header().Set("X-Airlock-Verdict", a.Verdict)
	if a.Verdict == sandbox.VerdictRejected {
		writeError(w, http.StatusForbidden, fmt.Sprintf("the artifact filter rejected %s: %s", p, a.Reason))
		return
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(size, 10))
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	hd.Set("X-Content-Type-Options", "nosniff")
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(transferTimeout))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.NewSectionReader(spool, 0, size))
}

// upload takes POST /files: a multipart form of "file" parts (each part's
// file name is its path when the query names none), or, as envd 0.5.7
// does, one application/octet-stream body, gzip-encoded or not, for the
// path in the query.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	s, q, ok := h.fileCall(w, r)
	if !ok {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(transferTimeout))
	put := func(dest string, body io.Reader) (writtenFile, error) {
		if dest == "" {
			return writtenFile{}, httpError(http.StatusBadRequest, "no path: give ?path= or a file name in the part")
		}
		p := resolve(dest)
		if _, err := s.Put(r.Context(), p, body, 0); err != nil {
			return writtenFile{}, err
		}
		return writtenFile{Name: path.Base(p), Type: "file", Path: p}, nil
	}
	out := []writtenFile{}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, "reading the form: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			dest := q.Get("path")
			if dest == "" {
				dest = partFileName(part)
			}
			wf, err := put(dest, part)
			part.Close()
			if err != nil {
				h.fileError(w, r, err)
				return
			}
			out = append(out, wf)
		}
		if len(out) == 0 {
			writeError(w, http.StatusBadRequest, "the form holds no \"file\" part")
			return
		}
	case "application/octet-stream", "":
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeError(w, http.StatusBadRequest, "gzip: "+err.Error())
				return
			}
			defer zr.Close()
			body = zr
		}
		wf, err := put(q.Get("path"), body)
		if err != nil {
			h.fileError(w, r, err)
			return
		}
		out = append(out, wf)
	default:
		writeError(w, http.StatusUnsupportedMediaType, "want multipart/form-data or application/octet-stream, not "+mt)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// partFileName reads a part's file name as sent, with its folders: the
// SDKs put the file's whole path there, and Part.FileName keeps only the
// last element.
func partFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}
