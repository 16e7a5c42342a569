package artifact

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// fieldBuf is how much of one CSV cell is held in memory. A longer cell is
// streamed out quoted, so a 100 MB cell never sits in memory.
const fieldBuf = 64 << 10

// errBinary means a text file holds bytes that never occur in text.
var errBinary = errors.New("binary data in a text file")

// csvStats counts what rewriteCSV changed.
type csvStats struct {
	neutralised int // cells that got a leading apostrophe
	quoted      int // cells quoted that were bare and needed quotes
	repaired    int // quoted cells with text after the closing quote or no closing quote
	lineEnds    int // lone CR record ends written as CRLF
}

// fixes describes the changes for a sanitized verdict.
func (s csvStats) fixes() []string {
	var out []string
	add := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(s.neutralised, "formula cells neutralised with a leading apostrophe")
	add(s.quoted, "cells quoted")
	add(s.repaired, "malformed quoted cells repaired")
	add(s.lineEnds, "lone CR line ends written as CRLF")
	return out
}

// Formula triggers: a spreadsheet evaluates a cell that starts with one of
// these (OWASP CSV injection), the full-width forms included, which some
// locales fold to ASCII.
var (
	asciiTriggers = "=+-@\t\r"
	wideTriggers  = []string{"\uff1d", "\uff0b", "\uff0d", "\uff20"}
)

// startsWithTrigger reports whether a cell would be read as a formula.
func startsWithTrigger(cell []byte) bool {
	if len(cell) == 0 {
		return false
	}
	if strings.IndexByte(asciiTriggers, cell[0]) >= 0 {
		return true
	}
	if cell[0] != wideTriggers[0][0] {
		return false
	}
	for _, t := range wideTriggers {
		if bytes.HasPrefix(cell, []byte(t)) {
			return true
		}
	}
	return false
}

// isPlainNumber reports whether cell is a decimal number and nothing else:
// an optional sign, digits with an optional point, an optional exponent.
// Such a cell starts with '-' or '+' but a spreadsheet reads it as a
// number constant: it calls no function and refers to nothing, so it
// cannot run anything. Neutralising it would turn every negative number of
// a data file into text and break sums and charts, so it is left alone.
func isPlainNumber(cell []byte) bool {
	i := 0
	if i < len(cell) && (cell[i] == '+' || cell[i] == '-') {
		i++
	}
	digits := 0
	for ; i < len(cell) && cell[i] >= '0' && cell[i] <= '9'; i++ {
		digits++
	}
	if i < len(cell) && cell[i] == '.' {
		i++
		for ; i < len(cell) && cell[i] >= '0' && cell[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(cell) && (cell[i] == 'e' || cell[i] == 'E') {
		i++
		if i < len(cell) && (cell[i] == '+' || cell[i] == '-') {
			i++
		}
		exp := 0
		for ; i < len(cell) && cell[i] >= '0' && cell[i] <= '9'; i++ {
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(cell)
}

// needsNeutralising reports whether a cell gets a leading apostrophe.
func needsNeutralising(cell []byte) bool {
	return startsWithTrigger(cell) && !isPlainNumber(cell)
}

// needsQuotes reports whether a bare cell must be quoted: it holds the
// separator, a quote, CR or LF, or another program's separator followed by
// a trigger, such as "a;=1", where a spreadsheet that splits on ';' (the
// list separator of many locales) would see a formula cell "=1". Quoting
// keeps the cell whole under any separator.
func needsQuotes(cell []byte, comma byte) bool {
	for i, c := range cell {
		switch {
		case c == comma || c == '"' || c == '\r' || c == '\n':
			return true
		case (c == ',' || c == ';' || c == '\t') && startsWithTrigger(cell[i+1:]):
			return true
		}
	}
	return false
}

// sniffComma picks the separator of a .csv file: the most frequent of ',',
// ';' and tab outside quotes on its first line; ',' on a tie.
func sniffComma(head []byte) byte {
	counts := map[byte]int{}
	inQuotes := false
	for _, c := range head {
		if c == '"' {
			inQuotes = !inQuotes
		}
		if inQuotes {
			continue
		}
		if c == '\n' || c == '\r' {
			break
		}
		counts[c]++
	}
	best := byte(',')
	for _, c := range []byte{';', '\t'} {
		if counts[c] > counts[best] {
			best = c
		}
	}
	return best
}

// csvRewriter streams one CSV or TSV file to w.
type csvRewriter struct {
	r        io.Reader
	buf      []byte
	pos, end int
	err      error // the read error that ended the input, io.EOF included
	w        *bufio.Writer
	comma    byte
	stop     [256]bool // bytes that end a run of bare cell text
	qstop    [256]bool // bytes that end a run of quoted cell text
	cell     []byte
	stats    csvStats
}

// rewriteCSV copies a CSV (comma ',' or ';') or TSV (comma '\t') file from
// r to w, cell by cell, and neutralises every cell that a spreadsheet would
// evaluate: a cell that starts with '=', '+', '-', '@', tab or CR (or a
// full-width '=', '+', '-', '@') gets a leading apostrophe, per the OWASP
// guidance on CSV injection, unless it is a plain number (see
// isPlainNumber). The output follows RFC 4180: a cell is quoted when it was
// quoted, or holds the separator, a quote, CR or LF, or hides a formula
// behind another separator, and quotes inside are doubled. Record ends (LF
// or CRLF) and a UTF-8 byte-order mark are kept, so a file that needs no
// change comes out byte for byte the same. Lone CRs end records and become
// CRLF. Parsing is lenient, since the output is rewritten canonically: a
// quote inside a bare cell is data, text after a closing quote belongs to
// the cell, and a quote left open at the end closes there. Binary bytes (NUL
// and other C0 controls than tab, CR, LF, FF and ESC) fail with errBinary:
// UTF-16 files are not supported.
func rewriteCSV(r io.Reader, w io.Writer, comma byte) (csvStats, error) {
	cr := &csvRewriter{r: r, buf: make([]byte, 256<<10), w: bufio.NewWriterSize(w, 64<<10), comma: comma}
	for c := range 0x20 {
		binary := c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != 0x1b
		cr.stop[c], cr.qstop[c] = binary, binary
	}
	for _, c := range []byte{comma, '\n', '\r', '"'} {
		cr.stop[c] = true
	}
	cr.qstop['"'] = true
	err := cr.run()
	if ferr := cr.w.Flush(); err == nil {
		err = ferr
	}
	return cr.stats, err
}

// fill reads more input after the unread bytes; it reports false at the
// end of the input or on a read error, which it keeps in cr.err.
func (cr *csvRewriter) fill() bool {
	if cr.err != nil {
		return false
	}
	cr.end = copy(cr.buf, cr.buf[cr.pos:cr.end])
	cr.pos = 0
	for cr.end < len(cr.buf) {
		n, err := cr.r.Read(cr.buf[cr.end:])
		cr.end += n
		if err != nil {
			cr.err = err
			break
		}
		if n > 0 {
			break
		}
	}
	return cr.end > cr.pos
}

// peek returns the next byte without consuming it.
func (cr *csvRewriter) peek() (byte, bool) {
	if cr.pos >= cr.end && !cr.fill() {
		return 0, false
	}
	return cr.buf[cr.pos], true
}

// readErr is the error that ended the input, nil for its normal end.
func (cr *csvRewriter) readErr() error {
	if cr.err == io.EOF {
		return nil
	}
	return cr.err
}

// run rewrites record after record until the input ends.
func (cr *csvRewriter) run() error {
	for cr.end-cr.pos < 3 && cr.fill() {
	}
	if bytes.HasPrefix(cr.buf[cr.pos:cr.end], []byte("\ufeff")) {
		cr.pos += 3
		cr.w.WriteString("\ufeff")
	}
	for {
		if _, ok := cr.peek(); !ok {
			return cr.readErr()
		}
		end, err := cr.field()
		if err != nil {
			return err
		}
		switch end {
		case endComma:
			err = cr.w.WriteByte(cr.comma)
		case endLF:
			err = cr.w.WriteByte('\n')
		case endCRLF:
			_, err = cr.w.WriteString("\r\n")
		case endCR:
			cr.stats.lineEnds++
			_, err = cr.w.WriteString("\r\n")
		case endEOF:
			return cr.readErr()
		}
		if err != nil {
			return err
		}
		if end == endComma {
			// A separator at the very end still opens an empty last cell.
			if _, ok := cr.peek(); !ok {
				return cr.readErr()
			}
		}
	}
}

// fieldEnd is what ended a cell.
type fieldEnd int

const (
	endComma fieldEnd = iota
	endLF
	endCRLF
	endCR
	endEOF
)

// scan returns the length of the run of buffered bytes before the first
// one that stop marks, or -1 when the whole buffer is such a run.
func (cr *csvRewriter) scan(stop *[256]bool) int {
	for i, c := range cr.buf[cr.pos:cr.end] {
		if stop[c] {
			return i
		}
	}
	return -1
}

// terminator tells the end that the byte c, just consumed, makes.
func (cr *csvRewriter) terminator(c byte) fieldEnd {
	switch c {
	case '\n':
		return endLF
	case '\r':
		if next, ok := cr.peek(); ok && next == '\n' {
			cr.pos++
			return endCRLF
		}
		return endCR
	}
	return endComma
}

// field reads one cell, in runs of plain bytes, into cr.cell, or streams
// it when it is long, and writes it out.
func (cr *csvRewriter) field() (fieldEnd, error) {
	cr.cell = cr.cell[:0]
	first, _ := cr.peek()
	quoted := first == '"'
	out := cellWriter{cr: cr, quoted: quoted}
	if quoted {
		cr.pos++
		if err := cr.quotedPart(&out); err != nil || out.open {
			return endEOF, err
		}
	}
	for {
		i := cr.scan(&cr.stop)
		if i < 0 {
			out.repaired = out.repaired || quoted && cr.end > cr.pos
			out.add(cr.buf[cr.pos:cr.end])
			cr.pos = cr.end
			if !cr.fill() {
				return endEOF, out.finish()
			}
			continue
		}
		out.repaired = out.repaired || quoted && i > 0 // text after the closing quote
		out.add(cr.buf[cr.pos : cr.pos+i])
		cr.pos += i
		c := cr.buf[cr.pos]
		cr.pos++
		switch {
		case c == '"':
			out.repaired = out.repaired || quoted
			out.add([]byte{'"'})
		case c == cr.comma || c == '\n' || c == '\r':
			end := cr.terminator(c)
			return end, out.finish()
		default:
			return endEOF, errBinary
		}
	}
}

// quotedPart reads a quoted cell up to its closing quote. At the end of
// the input it finishes the cell and leaves out.open set.
func (cr *csvRewriter) quotedPart(out *cellWriter) error {
	for {
		i := cr.scan(&cr.qstop)
		if i < 0 {
			out.add(cr.buf[cr.pos:cr.end])
			cr.pos = cr.end
			if !cr.fill() {
				out.repaired, out.open = true, true
				if err := cr.readErr(); err != nil {
					return err
				}
				return out.finish()
			}
			continue
		}
		out.add(cr.buf[cr.pos : cr.pos+i])
		cr.pos += i
		if cr.buf[cr.pos] != '"' {
			return errBinary
		}
		cr.pos++
		if next, ok := cr.peek(); !ok || next != '"' {
			return nil
		}
		cr.pos++
		out.add([]byte{'"'})
	}
}

// cellWriter collects one cell and writes it quoted or bare.
type cellWriter struct {
	cr        *csvRewriter
	quoted    bool // the input cell was quoted
	repaired  bool // the input cell was malformed
	open      bool // the input ended inside the quotes
	streaming bool // the cell outgrew fieldBuf and is being written quoted
}

// add appends cell content.
func (cw *cellWriter) add(b []byte) {
	cr := cw.cr
	if cw.streaming {
		writeQuoted(cr.w, b)
		return
	}
	cr.cell = append(cr.cell, b...)
	if len(cr.cell) >= fieldBuf {
		cw.start(true)
		cw.streaming = true
		cr.cell = cr.cell[:0]
	}
}

// writeQuoted writes cell text with its quotes doubled.
func writeQuoted(w *bufio.Writer, b []byte) {
	for {
		i := bytes.IndexByte(b, '"')
		if i < 0 {
			w.Write(b)
			return
		}
		w.Write(b[:i+1])
		w.WriteByte('"')
		b = b[i+1:]
	}
}

// start writes the head of the cell: the apostrophe when it is needed, the
// opening quote when quote is true, and the buffered content.
func (cw *cellWriter) start(quote bool) {
	cr := cw.cr
	if !cw.quoted && quote {
		cr.stats.quoted++
	}
	if quote {
		cr.w.WriteByte('"')
	}
	if needsNeutralising(cr.cell) {
		cr.stats.neutralised++
		cr.w.WriteByte('\'')
	}
	if !quote {
		cr.w.Write(cr.cell)
		return
	}
	writeQuoted(cr.w, cr.cell)
}

// finish writes what is left of the cell and its closing quote.
func (cw *cellWriter) finish() error {
	cr := cw.cr
	if cw.repaired {
		cr.stats.repaired++
	}
	quote := true
	if !cw.streaming {
		cell := cr.cell
		quote = cw.quoted || needsQuotes(cell, cr.comma)
		cw.start(quote)
	}
	if quote {
		return cr.w.WriteByte('"')
	}
	return nil
}
