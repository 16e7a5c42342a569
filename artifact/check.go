package artifact

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// ServeHint is the Artifact.ServeHint of markup (HTML, SVG, XML and
// Markdown): header lines, one per line, for a server that hands the file
// out. The policy forbids scripts, plugins and every fetch but inline
// styles and data: images, and the disposition keeps browsers from
// rendering the file in the server's origin.
const ServeHint = "Content-Security-Policy: sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'\n" +
	"Content-Disposition: attachment\n" +
	"X-Content-Type-Options: nosniff"

// Output receives the bytes that a host may keep and reads them back:
// rules that need random access (zip and Office files) inspect the copy
// they wrote, never a source that untrusted code might still change. An
// *os.File opened for reading and writing satisfies it.
type Output interface {
	io.Writer
	io.ReaderAt
}

// Check runs one file through the rules that Collect applies to each
// regular file, for a server that hands out a single file: name is the
// slash-separated path relative to the output folder, src the content,
// size the size the file claims (from stat; a file over the cap is refused
// from it without being read), and p the policy, normalized here.
//
// Check writes the bytes to hand out to out, starting at offset 0, and
// returns the artifact. When the verdict is rejected, out may hold a part of
// the file: discard it. Check returns an error only when writing to out
// fails or ctx ends; a hostile file yields a rejected verdict.
func Check(ctx context.Context, name string, src io.Reader, size int64, out Output, p sandbox.ArtifactPolicy) (sandbox.Artifact, error) {
	c := newChecker(Normalize(p))
	return c.check(ctx, name, src, size, c.p.MaxFileBytes, out)
}

// checker applies one normalized policy.
type checker struct {
	p    sandbox.ArtifactPolicy
	exts map[string]bool
}

// newChecker indexes the allowlist of a normalized policy.
func newChecker(p sandbox.ArtifactPolicy) *checker {
	c := &checker{p: p, exts: map[string]bool{}}
	for _, e := range p.Extensions {
		c.exts[e] = true
	}
	return c
}

// outcome is what the content rules made of one file.
type outcome struct {
	mime   string
	notes  []string // facts worth telling: a type mismatch
	fixes  []string // what sanitizing changed
	reject string   // why the file is refused, or ""
	hint   string
}

// sink is where a rule writes. ra reads back what was written to w, or is
// nil when w discards (inside archives, where only the verdict matters).
type sink struct {
	w  io.Writer
	ra io.ReaderAt
}

// check decides one file whose content is at most limit bytes.
func (c *checker) check(ctx context.Context, name string, src io.Reader, size, limit int64, out Output) (sandbox.Artifact, error) {
	a := sandbox.Artifact{Path: displayPath(name), Size: size}
	if why := c.precheck(name, size, limit); why != "" {
		return reject(a, why), nil
	}
	hw := &hashWriter{w: out, h: sha256.New()}
	in := &capReader{r: src, ctx: ctx, left: limit}
	o, err := c.content(name, in, sink{w: hw, ra: out}, newNesting())
	if err != nil {
		var herr hostError
		switch {
		case errors.As(err, &herr):
			return a, fmt.Errorf("write %s: %w", a.Path, herr.err)
		case ctx.Err() != nil:
			return a, ctx.Err()
		}
		o.reject = readFailure(err, limit)
	}
	a.MIME, a.ServeHint = o.mime, o.hint
	if o.reject != "" {
		a.ServeHint = ""
		return reject(a, strings.Join(append(o.notes, o.reject), "; ")), nil
	}
	a.Size = hw.n
	a.SHA256 = hex.EncodeToString(hw.h.Sum(nil))
	a.Verdict = sandbox.VerdictAccepted
	if len(o.fixes) > 0 {
		a.Verdict = sandbox.VerdictSanitized
	}
	a.Reason = strings.Join(append(o.notes, o.fixes...), "; ")
	return a, nil
}

// precheck refuses a file on its name, extension or claimed size, before
// anything is read.
func (c *checker) precheck(name string, size, limit int64) string {
	if why := c.checkRel(name); why != "" {
		return why
	}
	if why := c.checkExt(name); why != "" {
		return why
	}
	if size > limit {
		return fmt.Sprintf("file is %d bytes, over the cap of %d", size, limit)
	}
	return ""
}

// checkRel refuses a relative path on its form: checkPath under the
// policy's caps, then checkHidden.
func (c *checker) checkRel(rel string) string {
	if why := checkPath(rel, c.p.MaxDepth, c.p.MaxPathLen); why != "" {
		return why
	}
	return c.checkHidden(rel)
}

// checkExt refuses an extension that is not on the allowlist.
func (c *checker) checkExt(name string) string {
	ext := extOf(name)
	switch {
	case ext == "":
		return "no extension; the allowlist is by extension"
	case !c.exts[ext]:
		return fmt.Sprintf("extension .%s is not on the allowlist", ext)
	}
	return ""
}

// extOf returns the lower-cased extension of the last path component,
// without the dot.
func extOf(name string) string {
	return strings.ToLower(strings.TrimPrefix(path.Ext(path.Base(name)), "."))
}

// reject fills in a rejected verdict.
func reject(a sandbox.Artifact, why string) sandbox.Artifact {
	a.Verdict, a.Reason = sandbox.VerdictRejected, why
	a.SHA256 = ""
	return a
}

// readFailure words an error met while reading a file.
func readFailure(err error, limit int64) string {
	switch {
	case errors.Is(err, errTooBig):
		return fmt.Sprintf("file grew past the cap of %d bytes while it was read", limit)
	case errors.Is(err, errBinary):
		return "binary data in a text file (only UTF-8 and other ASCII-based text)"
	}
	return "read failed: " + err.Error()
}

// content sniffs a file, picks its rule and runs it.
func (c *checker) content(name string, src io.Reader, sk sink, nest *nesting) (outcome, error) {
	br := bufio.NewReaderSize(src, 64<<10)
	head, err := br.Peek(sniffLen)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return outcome{}, err
	}
	ext := extOf(name)
	k, sniffed := sniff(head)
	d := decide(ext, k, sniffed)
	o := outcome{mime: d.mime, reject: d.reject}
	if d.note != "" {
		o.notes = append(o.notes, d.note)
	}
	if isManifest(name) && d.rule != ruleReject {
		if d.rule != ruleText {
			o.reject = "package.json does not hold JSON text"
			return o, nil
		}
		o.reject, err = checkManifest(&textGuard{r: br}, sk.w)
		return o, err
	}
	switch d.rule {
	case ruleReject:
		return o, nil
	case ruleCopy:
		_, err = io.Copy(sk.w, br)
	case ruleText:
		_, err = io.Copy(sk.w, &textGuard{r: br})
	case ruleCSV:
		comma := byte('\t')
		if ext != "tsv" {
			full, _ := br.Peek(64 << 10)
			comma = sniffComma(full)
		}
		var st csvStats
		st, err = rewriteCSV(br, sk.w, comma)
		o.fixes = st.fixes()
	case ruleMarkup:
		o.hint = ServeHint
		err = c.markup(&textGuard{r: br}, sk, &o)
	case ruleZip:
		err = c.zip(br, sk, nest, &o)
	}
	return o, err
}

// markup runs sanitizeMarkup and, when it removed something, checks the
// result again: removing a token can join the text around it into a new
// tag, and then the file is refused.
func (c *checker) markup(r io.Reader, sk sink, o *outcome) error {
	cw := &countWriter{w: sk.w}
	strict := c.p.ActiveContent == ActiveReject || sk.ra == nil
	res, err := sanitizeMarkup(r, cw, strict)
	if err != nil {
		return err
	}
	o.reject, o.fixes = res.reject, res.fixes()
	if o.reject != "" || len(o.fixes) == 0 || sk.ra == nil {
		return nil
	}
	again, err := sanitizeMarkup(io.NewSectionReader(sk.ra, 0, cw.n), io.Discard, true)
	if err != nil {
		return hostError{err}
	}
	if again.reject != "" {
		o.reject = "after removing active content, " + again.reject
	}
	return nil
}

// errTooBig means a file grew past its cap while it was read.
var errTooBig = errors.New("file larger than its cap")

// capReader reads at most left bytes, fails with errTooBig past them, and
// stops when ctx ends.
type capReader struct {
	r    io.Reader
	ctx  context.Context
	left int64
}

// Read implements io.Reader.
func (c *capReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		return int(c.left), errTooBig
	}
	c.left -= int64(n)
	return n, err
}

// textGuard passes text through and fails with errBinary on bytes that
// never occur in text.
type textGuard struct{ r io.Reader }

// Read implements io.Reader.
func (g *textGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if isBinary(p[:n]) {
		return 0, errBinary
	}
	return n, err
}

// hostError marks a failure on the host side, which Check returns rather
// than turning into a verdict.
type hostError struct{ err error }

// Error implements error.
func (e hostError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e hostError) Unwrap() error { return e.err }

// hashWriter hashes and counts what it writes, and marks write failures
// as host errors.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

// Write implements io.Writer.
func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	if err != nil {
		return n, hostError{err}
	}
	return n, nil
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n int64
}

// Write implements io.Writer.
func (cw *countWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}
