package interp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// testLimit is the frame limit of these tests.
const testLimit = 64 << 10

func framed(body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// errAfter fails any read past its first n bytes: a frame reader that
// reads a refused body would see it.
type errAfter struct {
	r io.Reader
	n int
}

func (e *errAfter) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, errors.New("read past the header")
	}
	if len(p) > e.n {
		p = p[:e.n]
	}
	n, err := e.r.Read(p)
	e.n -= n
	return n, err
}

func TestReadFrameRefusesBeforeReading(t *testing.T) {
	for _, n := range []uint32{0, testLimit + 1, 1 << 31, 1<<32 - 1} {
		h := binary.BigEndian.AppendUint32(nil, n)
		r := &errAfter{r: io.MultiReader(bytes.NewReader(h), strings.NewReader(strings.Repeat("x", 1<<20))), n: 4}
		if _, err := readFrame(r, testLimit); !errors.Is(err, ErrProtocol) {
			t.Errorf("length %d: %v, want ErrProtocol before reading the body", n, err)
		}
	}
	if _, err := readFrame(bytes.NewReader(nil), testLimit); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
	if _, err := readFrame(bytes.NewReader(framed(`{"type":"end"`)[:8]), testLimit); err != io.ErrUnexpectedEOF {
		t.Errorf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	b, err := readFrame(bytes.NewReader(framed(`{}`)), testLimit)
	if err != nil || string(b) != "{}" {
		t.Errorf("a frame: %q %v", b, err)
	}
}

func TestParseFrame(t *testing.T) {
	good := []string{
		`{"type":"stdout","id":3,"text":"hi\n"}`,
		`{"type":"result","id":3,"data":{"text/plain":"42","text/html":"<b>42</b>"}}`,
		`{"type":"display","id":1,"data":{"image/png":"iVBORw0KGgo="}}`,
		`{"type":"error","id":1,"name":"ZeroDivisionError","value":"division by zero","traceback":["a","b"]}`,
		`{"type":"error","id":1,"name":"X"}`,
		`{"type":"end","id":9007199254740991,"execution_count":4}`,
		`{"type":"ready","runner":"stdlib","language":"python","version":"3.11.2","pid":7}`,
		`{"type":"attached","seq":2}`,
		`{"type":"fatal","reason":"bash exited with status 3"}`,
		` {"id":1, "text":"", "type":"stderr"} `,
	}
	for _, s := range good {
		if _, err := parseFrame([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := map[string]string{
		"not an object":       `[1]`,
		"two objects":         `{"type":"end","id":1}{"type":"end","id":1}`,
		"trailing garbage":    `{"type":"end","id":1} x`,
		"unknown type":        `{"type":"exec","id":1}`,
		"unknown field":       `{"type":"end","id":1,"extra":1}`,
		"duplicate field":     `{"type":"end","id":1,"id":2}`,
		"field of the type":   `{"type":"stdout","id":1,"text":"x","data":{"text/plain":"x"}}`,
		"missing field":       `{"type":"stdout","id":1}`,
		"string id":           `{"type":"end","id":"1"}`,
		"negative id":         `{"type":"end","id":-1}`,
		"fractional id":       `{"type":"end","id":1.5}`,
		"huge id":             `{"type":"end","id":9007199254740992}`,
		"number text":         `{"type":"stdout","id":1,"text":5}`,
		"null text":           `{"type":"stdout","id":1,"text":null}`,
		"non-string bundle":   `{"type":"result","id":1,"data":{"text/plain":1}}`,
		"nested bundle":       `{"type":"result","id":1,"data":{"text/plain":{"a":"b"}}}`,
		"bad MIME key":        `{"type":"result","id":1,"data":{"Text/Plain":"x"}}`,
		"MIME key with space": `{"type":"result","id":1,"data":{"text/plain; charset=utf-8":"x"}}`,
		"empty bundle":        `{"type":"result","id":1,"data":{}}`,
		"duplicate MIME":      `{"type":"result","id":1,"data":{"text/plain":"a","text/plain":"b"}}`,
		"traceback of ints":   `{"type":"error","id":1,"name":"X","traceback":[1]}`,
		"long name":           `{"type":"error","id":1,"name":"` + strings.Repeat("n", maxShortField+1) + `"}`,
		"too many lines":      `{"type":"error","id":1,"name":"X","traceback":[` + strings.Repeat(`"",`, maxTraceback) + `""]}`,
		"too many MIME types": `{"type":"result","id":1,"data":{` + manyMIME(maxMIMEEntries+1) + `}}`,
		"bad syntax":          `{"type":"end","id":1,}`,
		"empty":               ``,
	}
	for name, s := range bad {
		if _, err := parseFrame([]byte(s)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %s: %v, want ErrProtocol", name, s, err)
		}
	}
}

func manyMIME(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"text/x` + strings.Repeat("a", i) + `":""`)
	}
	return b.String()
}

// FuzzFrames feeds the frame reader and parser arbitrary streams: they
// must never panic, must read no frame over the limit, and must stop at
// the first error.
func FuzzFrames(f *testing.F) {
	f.Add(framed(`{"type":"stdout","id":1,"text":"hi"}`))
	f.Add(framed(`{"type":"result","id":1,"data":{"text/plain":"1","image/png":"AAAA"}}`))
	f.Add(append(framed(`{"type":"error","id":2,"name":"E","value":"v","traceback":["x","y"]}`), framed(`{"type":"end","id":2,"execution_count":1}`)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add(framed(`{"type":"error","id":1,"name":"X","traceback":[` + strings.Repeat(`"",`, 2000) + `""]}`))
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bytes.NewReader(stream)
		for {
			before := r.Len()
			b, err := readFrame(r, testLimit)
			if err != nil {
				return
			}
			if len(b) > testLimit || before-r.Len() != len(b)+4 {
				t.Fatalf("read a frame of %d bytes, consumed %d", len(b), before-r.Len())
			}
			fr, err := parseFrame(b)
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("parse error not a protocol error: %v", err)
				}
				return
			}
			if _, ok := frameRules[fr.Type]; !ok {
				t.Fatalf("parsed a frame of unknown type %q", fr.Type)
			}
			if len(fr.Data) > maxMIMEEntries || len(fr.Traceback) > maxTraceback {
				t.Fatalf("over a count limit: %d entries, %d lines", len(fr.Data), len(fr.Traceback))
			}
		}
	})
}
