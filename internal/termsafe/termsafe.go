// Package termsafe keeps what an untrusted program prints from taking
// over the terminal it is shown on.
//
// A program that can write escape sequences to a terminal can move the
// cursor and overwrite earlier lines, clear the screen, set the window
// title, hide text, write to the clipboard (OSC 52) or, on some terminals,
// make it answer with bytes that land in the shell's input. A Writer lets
// through printable text (UTF-8), newline, tab, a carriage return directly
// followed by a newline, and plain colours: SGR sequences ESC [ params m
// whose parameters are numbers from 0 to 107 other than 8 (concealed
// text), separated by ';'. Every other control character is replaced by
// its caret notation, the one `cat -v` uses, so that it shows and does
// nothing:
//
//   - C0 controls as ^@ … ^_ (ESC is ^[, BEL ^G, backspace ^H, a lone
//     carriage return ^M), DEL as ^?;
//   - C1 controls (U+0080 … U+009F, such as U+009B, the one-character CSI)
//     and bytes that are not valid UTF-8 as M- and the notation of the byte
//     less 0x80: U+009B is M-^[, the byte 0xE9 is M-i.
//
// Since the ESC or C1 control that opens a sequence is replaced, what
// follows it (the title of an OSC, the payload of a DCS, APC, PM or SOS
// string, the parameters of a cursor move) stays on the screen as plain
// text. A Writer keeps its state between Write calls, so a sequence split
// across writes is judged as a whole; its output is valid UTF-8, and
// passing it through a Writer again changes nothing.
//
// A Terminal groups the Writers that share one terminal (a command's
// stdout and stderr) and knows whether the last byte it showed ended a
// line, so that a caller's own messages start on a line of their own in
// the default colours (Terminal.Say).
package termsafe

import (
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxParams caps the parameter bytes of a colour sequence that is held
// back while it is incomplete; a longer one is shown as text.
const maxParams = 32

// esc is the escape character.
const esc = 0x1b

// Terminal is one terminal that several Writers write to. Its methods and
// those of its Writers may be called from several goroutines.
type Terminal struct {
	mu      sync.Mutex
	writers []*Writer
	// midLine is set when the last byte shown was not a newline.
	midLine bool
}

// Writer writes to a terminal what is written to it, filtered as the
// package doc says (or unchanged, when made with raw set).
type Writer struct {
	t   *Terminal
	w   io.Writer
	raw bool
	// pend holds bytes whose rendering depends on what comes next: an ESC
	// and the start of a colour sequence, a carriage return, or the first
	// bytes of a UTF-8 sequence.
	pend []byte
}

// Writer returns a Writer that writes to w, the terminal or a stream shown
// on it. With raw set it passes every byte unchanged and only tracks the
// line for Fresh.
func (t *Terminal) Writer(w io.Writer, raw bool) *Writer {
	t.mu.Lock()
	defer t.mu.Unlock()
	tw := &Writer{t: t, w: w, raw: raw}
	t.writers = append(t.writers, tw)
	return tw
}

// Write filters p and writes the result. It returns len(p) when the
// underlying write succeeds, though it may write more or fewer bytes.
func (w *Writer) Write(p []byte) (int, error) {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	var out []byte
	if w.raw {
		out = p
	} else {
		out = w.filter(make([]byte, 0, len(p)+len(p)/8), p)
	}
	if err := w.t.show(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes out, rendered as text, what an unfinished sequence held
// back: at the end of a stream nothing is coming to complete it.
func (w *Writer) Flush() error {
	w.t.mu.Lock()
	defer w.t.mu.Unlock()
	return w.flushLocked()
}

// flushLocked is Flush with the terminal's lock held.
func (w *Writer) flushLocked() error {
	if len(w.pend) == 0 {
		return nil
	}
	out := w.renderPend(nil)
	return w.t.show(w.w, out)
}

// Flush flushes every Writer of the terminal.
func (t *Terminal) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushLocked()
}

// flushLocked is Flush with the lock held.
func (t *Terminal) flushLocked() error {
	for _, tw := range t.writers {
		if err := tw.flushLocked(); err != nil {
			return err
		}
	}
	return nil
}

// Say writes the caller's own line to w, the terminal, unfiltered, so
// that a program's output can neither hide it nor run into it: it flushes
// every Writer of the terminal, then writes a reset (ESC [ 0 m), a newline
// unless the last byte shown ended a line, and the line, ending it with a
// newline if it has none.
func (t *Terminal) Say(w io.Writer, line string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.flushLocked(); err != nil {
		return err
	}
	out := []byte("\x1b[0m")
	if t.midLine {
		out = append(out, '\n')
	}
	out = append(out, line...)
	if !strings.HasSuffix(line, "\n") {
		out = append(out, '\n')
	}
	return t.show(w, out)
}

// show writes b to w and notes whether it ended a line. The lock is held.
func (t *Terminal) show(w io.Writer, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	t.midLine = b[len(b)-1] != '\n'
	return nil
}

// filter appends to dst the rendering of p, holding back what depends on
// the bytes after it.
func (w *Writer) filter(dst, p []byte) []byte {
	for i := 0; i < len(p); {
		var used bool
		dst, used = w.step(dst, p[i])
		if used {
			i++
		}
	}
	return dst
}

// step handles one byte. It reports false when the byte ended a held-back
// sequence without belonging to it; the caller then hands it in again.
func (w *Writer) step(dst []byte, b byte) ([]byte, bool) {
	if len(w.pend) == 0 {
		return w.ground(dst, b), true
	}
	switch first := w.pend[0]; {
	case first == esc:
		return w.colour(dst, b)
	case first == '\r':
		w.pend = w.pend[:0]
		if b == '\n' {
			return append(dst, '\r', '\n'), true
		}
		return caret(dst, '\r'), false
	default:
		return w.utf8(dst, b)
	}
}

// ground handles a byte when nothing is held back.
func (w *Writer) ground(dst []byte, b byte) []byte {
	switch {
	case b == esc || b == '\r':
		w.pend = append(w.pend, b)
		return dst
	case b == '\n' || b == '\t' || b >= 0x20 && b < 0x7f:
		return append(dst, b)
	case b < 0x80:
		return caret(dst, b)
	case b >= 0xc2 && b <= 0xf4:
		w.pend = append(w.pend, b) // the first byte of a UTF-8 sequence
		return dst
	}
	return caret(dst, b) // a stray continuation byte or a byte UTF-8 never uses
}

// colour handles a byte after ESC: it grows a colour sequence and lets it
// through when it is complete and allowed, and otherwise shows what was
// held as text.
func (w *Writer) colour(dst []byte, b byte) ([]byte, bool) {
	switch {
	case len(w.pend) == 1 && b == '[':
		w.pend = append(w.pend, b)
		return dst, true
	case len(w.pend) >= 2 && (b >= '0' && b <= '9' || b == ';') && len(w.pend)-2 < maxParams:
		w.pend = append(w.pend, b)
		return dst, true
	case len(w.pend) >= 2 && b == 'm' && allowedSGR(w.pend[2:]):
		dst = append(append(dst, w.pend...), 'm')
		w.pend = w.pend[:0]
		return dst, true
	}
	return w.renderPend(dst), false
}

// allowedSGR reports whether the parameters of an SGR sequence are plain
// colours and attributes: numbers from 0 to 107, empty ones (meaning 0)
// included, but not 8, which conceals text.
func allowedSGR(params []byte) bool {
	n, digits := 0, 0
	for i := 0; i <= len(params); i++ {
		if i == len(params) || params[i] == ';' {
			if digits > 0 && (n > 107 || n == 8) {
				return false
			}
			n, digits = 0, 0
			continue
		}
		n = n*10 + int(params[i]-'0')
		digits++
		if n > 107 {
			return false
		}
	}
	return true
}

// utf8 handles a byte after the first bytes of a UTF-8 sequence: a valid
// character passes unless it is a C1 control, which is shown in caret
// notation; bytes that do not make a valid character are shown one by
// one.
func (w *Writer) utf8(dst []byte, b byte) ([]byte, bool) {
	if b&0xc0 != 0x80 {
		return w.renderPend(dst), false
	}
	w.pend = append(w.pend, b)
	if !utf8.FullRune(w.pend) {
		return dst, true
	}
	r, size := utf8.DecodeRune(w.pend)
	switch {
	case r == utf8.RuneError && size == 1:
		return w.renderPend(dst), true
	case r >= 0x80 && r <= 0x9f:
		dst = caret(dst, byte(r))
	default:
		dst = append(dst, w.pend...)
	}
	w.pend = w.pend[:0]
	return dst, true
}

// renderPend appends what is held back as text and empties it: each
// control byte in caret notation, the rest as it is.
func (w *Writer) renderPend(dst []byte) []byte {
	for _, b := range w.pend {
		if b >= 0x20 && b < 0x7f {
			dst = append(dst, b)
		} else {
			dst = caret(dst, b)
		}
	}
	w.pend = w.pend[:0]
	return dst
}

// caret appends the notation of cat -v for a byte that is not shown as
// itself: ^@ … ^_ for C0 controls, ^? for DEL, and M- and the notation of
// b-0x80 for bytes from 0x80 up.
func caret(dst []byte, b byte) []byte {
	if b >= 0x80 {
		dst = append(dst, 'M', '-')
		b -= 0x80
	}
	switch {
	case b < 0x20:
		return append(dst, '^', b+0x40)
	case b == 0x7f:
		return append(dst, '^', '?')
	}
	return append(dst, b)
}
