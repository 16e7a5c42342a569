package interp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
)

// The protocol is a stream of frames: a 4-byte big-endian length n, then
// n bytes holding one JSON object. The runner writes events this way, and
// the host writes requests the same way to the runner's stdin.
//
// Everything the runner sends is untrusted: code in the context can write
// frames too. readFrame refuses a length over the limit before reading a
// byte of the body, and parseFrame reads the object token by token, so
// that no frame can make the host hold more than the frame's own size in
// memory (a frame of many tiny array elements or object keys is refused
// at the count limit, not decoded first).

// Limits on one frame's structure, besides its size.
const (
	maxMIMEEntries  = 32   // entries in a data bundle
	maxTraceback    = 1000 // lines of a traceback
	maxShortField   = 4096 // bytes of name, runner, language, version
	maxMIMEKeyBytes = 128
)

// ErrProtocol means the runner, or code writing to its channel, broke the
// protocol: a frame too large, malformed, out of place or over a budget.
var ErrProtocol = errors.New("protocol violation")

// mimeKey is the syntax a MIME bundle's key must have: lower case
// type/subtype, as the runners write them.
var mimeKey = regexp.MustCompile(`^[a-z][a-z0-9.+-]*/[a-z0-9][a-z0-9.+_-]*$`)

// readFrame reads one frame's body. It returns io.EOF at a clean end of
// the stream, and an error wrapping ErrProtocol for an empty frame or one
// over limit bytes, which it does not read.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	switch {
	case n == 0:
		return nil, fmt.Errorf("empty frame: %w", ErrProtocol)
	case uint64(n) > uint64(limit):
		return nil, fmt.Errorf("frame of %d bytes is over the limit of %d: %w", n, limit, ErrProtocol)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// appendFrame appends v's frame to dst.
func appendFrame(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...), nil
}

// frame is one parsed message from the runner.
type frame struct {
	Type           string
	ID             uint64
	Seq            uint64
	Text           string
	Data           map[string]string
	Name           string
	Value          string
	Traceback      []string
	ExecutionCount uint64
	Runner         string
	Language       string
	Version        string
	Reason         string
	Path           string
	Pid            uint64
	fields         uint32 // which fields were present (1 << field)
}

// The fields a frame may carry.
const (
	fType = iota
	fID
	fSeq
	fText
	fData
	fName
	fValue
	fTraceback
	fExecutionCount
	fRunner
	fLanguage
	fVersion
	fReason
	fPath
	fPid
)

var fieldNames = map[string]int{
	"type": fType, "id": fID, "seq": fSeq, "text": fText, "data": fData, "name": fName,
	"value": fValue, "traceback": fTraceback, "execution_count": fExecutionCount,
	"runner": fRunner, "language": fLanguage, "version": fVersion, "reason": fReason, "path": fPath, "pid": fPid,
}

func bits(fs ...int) uint32 {
	var b uint32
	for _, f := range fs {
		b |= 1 << f
	}
	return b
}

// frameRules says, for each type of frame, which fields it must carry and
// which it may.
var frameRules = map[string]struct{ must, may uint32 }{
	"ready":    {bits(fType, fRunner, fLanguage), bits(fVersion, fPid)},
	"attached": {bits(fType, fSeq), 0},
	"detach":   {bits(fType, fSeq), 0},
	"rotate":   {bits(fType, fSeq, fPath), 0},
	"stdout":   {bits(fType, fID, fText), 0},
	"stderr":   {bits(fType, fID, fText), 0},
	"result":   {bits(fType, fID, fData), 0},
	"display":  {bits(fType, fID, fData), 0},
	"error":    {bits(fType, fID, fName), bits(fValue, fTraceback)},
	"end":      {bits(fType, fID), bits(fExecutionCount)},
	"fatal":    {bits(fType, fReason), bits(fID)},
}

// parseFrame parses one frame's body strictly: one JSON object, known
// fields of the right types only, each at most once, the fields its type
// needs and no others, bounded counts, nothing after the object.
func parseFrame(b []byte) (*frame, error) {
	f, err := parseObject(b)
	if err != nil {
		return nil, fmt.Errorf("malformed frame: %v: %w", err, ErrProtocol)
	}
	rule, ok := frameRules[f.Type]
	if !ok {
		return nil, fmt.Errorf("frame of unknown type %.64q: %w", f.Type, ErrProtocol)
	}
	if f.fields&rule.must != rule.must || f.fields&^(rule.must|rule.may) != 0 {
		return nil, fmt.Errorf("%s frame with the wrong fields: %w", f.Type, ErrProtocol)
	}
	if f.Type == "result" || f.Type == "display" {
		if len(f.Data) == 0 {
			return nil, fmt.Errorf("%s frame with an empty bundle: %w", f.Type, ErrProtocol)
		}
	}
	return f, nil
}

type tokens struct{ d *json.Decoder }

func (t tokens) delim(want json.Delim) error {
	tok, err := t.d.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}

func (t tokens) str(max int) (string, error) {
	tok, err := t.d.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", tok)
	}
	if max > 0 && len(s) > max {
		return "", fmt.Errorf("string of %d bytes, over %d", len(s), max)
	}
	return s, nil
}

func (t tokens) uint() (uint64, error) {
	tok, err := t.d.Token()
	if err != nil {
		return 0, err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, fmt.Errorf("want a number, got %T", tok)
	}
	v, err := strconv.ParseUint(string(n), 10, 53)
	if err != nil {
		return 0, fmt.Errorf("want a whole number below 2^53, got %.32s", n)
	}
	return v, nil
}

func parseObject(b []byte) (*frame, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	t := tokens{d}
	if err := t.delim('{'); err != nil {
		return nil, err
	}
	f := &frame{}
	for d.More() {
		key, err := t.str(64)
		if err != nil {
			return nil, err
		}
		idx, ok := fieldNames[key]
		if !ok {
			return nil, fmt.Errorf("unknown field %q", key)
		}
		if f.fields&(1<<idx) != 0 {
			return nil, fmt.Errorf("field %q given twice", key)
		}
		f.fields |= 1 << idx
		switch idx {
		case fType:
			f.Type, err = t.str(64)
		case fID:
			f.ID, err = t.uint()
		case fSeq:
			f.Seq, err = t.uint()
		case fExecutionCount:
			f.ExecutionCount, err = t.uint()
		case fPid:
			f.Pid, err = t.uint()
		case fText:
			f.Text, err = t.str(0)
		case fValue:
			f.Value, err = t.str(0)
		case fReason:
			f.Reason, err = t.str(0)
		case fPath:
			f.Path, err = t.str(maxShortField)
		case fName:
			f.Name, err = t.str(maxShortField)
		case fRunner:
			f.Runner, err = t.str(maxShortField)
		case fLanguage:
			f.Language, err = t.str(maxShortField)
		case fVersion:
			f.Version, err = t.str(maxShortField)
		case fTraceback:
			f.Traceback, err = t.strings()
		case fData:
			f.Data, err = t.bundle()
		}
		if err != nil {
			return nil, fmt.Errorf("field %q: %v", key, err)
		}
	}
	if err := t.delim('}'); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	return f, nil
}

func (t tokens) strings() ([]string, error) {
	if err := t.delim('['); err != nil {
		return nil, err
	}
	var out []string
	for t.d.More() {
		if len(out) == maxTraceback {
			return nil, fmt.Errorf("more than %d entries", maxTraceback)
		}
		s, err := t.str(0)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, t.delim(']')
}

func (t tokens) bundle() (map[string]string, error) {
	if err := t.delim('{'); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for t.d.More() {
		if len(out) == maxMIMEEntries {
			return nil, fmt.Errorf("more than %d entries", maxMIMEEntries)
		}
		k, err := t.str(maxMIMEKeyBytes)
		if err != nil {
			return nil, err
		}
		if !mimeKey.MatchString(k) {
			return nil, fmt.Errorf("%.64q is not a MIME type", k)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q given twice", k)
		}
		v, err := t.str(0)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, t.delim('}')
}
