package artifact

import (
	"archive/zip"
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Caps of the zip rule that the policy does not set.
const (
	// maxNesting caps archives inside archives (a docx holding an xlsx
	// is two levels).
	maxNesting = 3
	// maxNestedSize caps an archive inside an archive, which is held in
	// memory to be scanned, since a zip is read from its end.
	maxNestedSize = 32 << 20
	// ratioGrace is the expansion under which an entry is not held to
	// the ratio cap: small, highly regular XML parts compress very well.
	ratioGrace = 1 << 20
	// dirBytesPerEntry is how many central directory bytes are read per
	// entry that the entry cap lets in, before the directory is deemed too
	// large; a record is 46 bytes plus its name, extra field and comment.
	dirBytesPerEntry = 320
	// dirSlack covers the end-of-directory search (the last 64 KiB plus
	// the record) and read-ahead.
	dirSlack = 80 << 10
)

// nesting is shared by an archive and the archives nested in it: their
// entries and bytes count toward the same caps.
type nesting struct {
	depth   int
	entries int
	bytes   int64
}

// newNesting starts the count for one top-level file.
func newNesting() *nesting { return &nesting{} }

// zip runs the zip rule: the content is copied to the sink first and the
// copy is scanned, so that a file that changes while it is read cannot
// show one thing to the scan and another to the host. Inside an archive,
// where nothing is written, the content is held in memory instead.
func (c *checker) zip(r io.Reader, sk sink, nest *nesting, o *outcome) error {
	var (
		ra   io.ReaderAt
		size int64
	)
	if sk.ra != nil {
		n, err := io.Copy(sk.w, r)
		if err != nil {
			return err
		}
		ra, size = sk.ra, n
	} else {
		if nest.depth >= maxNesting {
			o.reject = fmt.Sprintf("archives nested more than %d deep", maxNesting)
			return nil
		}
		data, err := io.ReadAll(io.LimitReader(r, maxNestedSize+1))
		if err != nil {
			return err
		}
		if len(data) > maxNestedSize {
			o.reject = fmt.Sprintf("archive inside an archive is over %d bytes", maxNestedSize)
			return nil
		}
		ra, size = bytes.NewReader(data), int64(len(data))
	}
	res, err := c.scanZip(ra, size, nest)
	if err != nil {
		return err
	}
	o.reject = res.reject
	if res.mime != "" {
		if res.mime != o.mime && o.mime != "" {
			o.notes = append(o.notes, fmt.Sprintf("content is %s", res.mime))
		}
		o.mime = res.mime
	}
	return nil
}

// zipResult is what scanZip found.
type zipResult struct {
	reject string
	mime   string // application/zip or the Office type
}

// scanZip checks an archive without extracting it: the central directory
// is read within a byte budget that follows the entry cap; entry names
// must be safe and unique; entry data must not overlap (the trick of
// zip bombs that reuse one compressed stream); every entry is decompressed
// through a counting reader with hard caps on its ratio and on the bytes
// of the whole archive, nested ones included. Office Open XML packages
// (those with a [Content_Types].xml) go through the Office part rules,
// other archives through the extension allowlist and the content rules of
// each entry, where anything that would need sanitizing refuses the
// archive, since archives are not rewritten.
func (c *checker) scanZip(ra io.ReaderAt, size int64, nest *nesting) (zipResult, error) {
	nest.depth++
	defer func() { nest.depth-- }()
	left := c.p.MaxArchiveEntries - nest.entries
	budget := &budgetReaderAt{ra: ra, left: int64(dirSlack + max(left, 0)*dirBytesPerEntry)}
	zr, err := zip.NewReader(budget, size)
	if budget.exceeded {
		return zipResult{reject: fmt.Sprintf("central directory is larger than %d entries need", left)}, nil
	}
	if err != nil {
		return zipResult{reject: "not a valid zip archive: " + err.Error()}, nil
	}
	budget.left = -1 // no more budget: entries are capped by their own readers
	if len(zr.File) > left {
		return zipResult{reject: fmt.Sprintf("archive has %d entries, over the cap of %d", len(zr.File), left)}, nil
	}
	if why := checkEntries(zr.File, size); why != "" {
		return zipResult{reject: why}, nil
	}
	var ox *ooxmlScan
	if slices.ContainsFunc(zr.File, func(f *zip.File) bool { return f.Name == "[Content_Types].xml" }) {
		ox = &ooxmlScan{}
	}
	for _, f := range zr.File {
		nest.entries++
		why, err := c.entry(f, ox, nest)
		if err != nil {
			return zipResult{}, err
		}
		if why != "" {
			return zipResult{reject: fmt.Sprintf("entry %s: %s", displayPath(f.Name), why)}, nil
		}
	}
	if ox == nil {
		return zipResult{mime: "application/zip"}, nil
	}
	return zipResult{mime: ox.mime()}, nil
}

// checkEntries refuses unsafe or duplicate names and overlapping data.
func checkEntries(files []*zip.File, size int64) string {
	type span struct {
		start, end int64
		name       string
	}
	seen := map[string]bool{}
	spans := make([]span, 0, len(files))
	for _, f := range files {
		if why := checkEntryName(f.Name); why != "" {
			return fmt.Sprintf("entry %s: %s", displayPath(f.Name), why)
		}
		key := strings.ToLower(strings.TrimSuffix(f.Name, "/"))
		if seen[key] {
			return fmt.Sprintf("entry %s: name occurs twice", displayPath(f.Name))
		}
		seen[key] = true
		off, err := f.DataOffset()
		if err != nil {
			return fmt.Sprintf("entry %s: local header unreadable: %v", displayPath(f.Name), err)
		}
		end := off + int64(f.CompressedSize64)
		if end > size || end < off {
			return fmt.Sprintf("entry %s: data runs past the end of the archive", displayPath(f.Name))
		}
		spans = append(spans, span{off, end, f.Name})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return fmt.Sprintf("entries %s and %s share data (an overlapping zip bomb)", displayPath(spans[i-1].name), displayPath(spans[i].name))
		}
	}
	return ""
}

// checkEntryName refuses an entry name that could escape a folder it is
// extracted to, or that is not clean: absolute names, drive letters,
// backslashes, and any component that checkName refuses ("..", ".", empty,
// NUL, control characters, invalid UTF-8). A trailing slash marks a folder.
func checkEntryName(name string) string {
	switch {
	case name == "":
		return "empty name"
	case strings.HasPrefix(name, "/"):
		return "absolute name"
	case len(name) >= 2 && name[1] == ':':
		return "name with a drive letter"
	}
	for part := range strings.SplitSeq(strings.TrimSuffix(name, "/"), "/") {
		if why := checkName(part); why != "" {
			return why
		}
	}
	return ""
}

// entry checks one entry; it returns why the archive must be refused.
func (c *checker) entry(f *zip.File, ox *ooxmlScan, nest *nesting) (string, error) {
	if f.Flags&1 != 0 {
		return "encrypted; it cannot be inspected", nil
	}
	if f.Method != zip.Store && f.Method != zip.Deflate {
		return fmt.Sprintf("compression method %d is not supported", f.Method), nil
	}
	er := c.entryReader(f, nest)
	if f.UncompressedSize64 > uint64(er.left) {
		return fmt.Sprintf("declares %d bytes: %s", f.UncompressedSize64, er.why), nil
	}
	rc, err := f.Open()
	if err != nil {
		return "cannot be read: " + err.Error(), nil
	}
	defer rc.Close()
	er.r = rc
	var why string
	switch {
	case ox != nil:
		why, err = c.part(f.Name, er, ox, nest)
	case strings.HasSuffix(f.Name, "/"):
	default:
		why, err = c.plainEntry(f.Name, er, nest)
	}
	if err == nil && why == "" {
		_, err = io.Copy(io.Discard, er)
	}
	nest.bytes += er.read
	var herr hostError
	switch {
	case errors.As(err, &herr):
		return "", err
	case errors.Is(err, errEntryCap):
		return er.why, nil
	case err != nil:
		return readFailure(err, er.left), nil
	}
	return why, nil
}

// plainEntry checks an entry of an archive that is not an Office file: its
// extension must be on the allowlist and its content must pass the content
// rules without any change.
func (c *checker) plainEntry(name string, r io.Reader, nest *nesting) (string, error) {
	if why := c.checkExt(name); why != "" {
		return why, nil
	}
	o, err := c.content(name, r, sink{w: io.Discard}, nest)
	switch {
	case err != nil:
		return "", err
	case o.reject != "":
		return o.reject, nil
	case len(o.fixes) > 0:
		return "would need sanitizing (" + strings.Join(o.fixes, ", ") + "), and archives are not rewritten", nil
	}
	return "", nil
}

// errEntryCap means an entry expanded past a cap.
var errEntryCap = errors.New("entry expands past a cap")

// entryReader counts the decompressed bytes of one entry and fails past
// its cap.
type entryReader struct {
	r    io.Reader
	left int64
	read int64
	why  string // the cap that left stands for
}

// entryReader sets the cap of one entry: the bytes the archive has left,
// or the ratio cap when that is lower.
func (c *checker) entryReader(f *zip.File, nest *nesting) *entryReader {
	er := &entryReader{
		left: c.p.MaxArchiveBytes - nest.bytes,
		why:  fmt.Sprintf("expands past the cap of %d uncompressed bytes per archive", c.p.MaxArchiveBytes),
	}
	ratio := int64(c.p.MaxArchiveRatio)
	if byRatio := max(int64(f.CompressedSize64)*ratio, ratioGrace); byRatio < er.left {
		er.left = byRatio
		er.why = fmt.Sprintf("expands more than %d:1 (a zip bomb)", ratio)
	}
	return er
}

// Read implements io.Reader.
func (er *entryReader) Read(p []byte) (int, error) {
	if int64(len(p)) > er.left+1 {
		p = p[:er.left+1]
	}
	n, err := er.r.Read(p)
	if int64(n) > er.left {
		er.read += er.left
		er.left = 0
		return 0, errEntryCap
	}
	er.left -= int64(n)
	er.read += int64(n)
	return n, err
}

// budgetReaderAt fails reads past a byte budget, while left is not
// negative: archive/zip reads central directory records until they stop
// parsing, whatever count the archive declares.
type budgetReaderAt struct {
	ra       io.ReaderAt
	left     int64
	exceeded bool
}

// ReadAt implements io.ReaderAt. A negative offset, which a corrupt
// header can make, is an error here whatever the Output does with it.
func (b *budgetReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset in the archive")
	}
	if b.left >= 0 {
		if int64(len(p)) > b.left {
			b.exceeded = true
			return 0, errEntryCap
		}
		b.left -= int64(len(p))
	}
	return b.ra.ReadAt(p, off)
}

// peekKind sniffs the head of an entry without consuming it.
func peekKind(br *bufio.Reader) kind {
	head, _ := br.Peek(sniffLen)
	k, _ := sniff(head)
	return k
}
