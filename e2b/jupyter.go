package e2b

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/interp"
)

// The code interpreter's wire: NDJSON lines, one object each, of these
// types, as the SDKs' runCode reads them.
const (
	lineStdout     = "stdout"
	lineStderr     = "stderr"
	lineResult     = "result"
	lineError      = "error"
	lineCount      = "number_of_executions"
	lineEnd        = "end_of_execution"
	lineKeepalive  = "keepalive"
	keepaliveEvery = 5 * time.Second
)

// resultKeys are the SDKs' names of the MIME types of a result's bundle;
// a type not listed keeps its MIME name (the SDKs show it under extra).
var resultKeys = map[string]string{
	interp.MIMEText:          "text",
	interp.MIMEHTML:          "html",
	interp.MIMEMarkdown:      "markdown",
	interp.MIMESVG:           "svg",
	interp.MIMEPNG:           "png",
	interp.MIMEJPEG:          "jpeg",
	interp.MIMELaTeX:         "latex",
	interp.MIMEJSON:          "json",
	"application/pdf":        "pdf",
	"application/javascript": "javascript",
}

// lines turns one interpreter event into the code interpreter's lines.
func lines(ev interp.Event, now time.Time) []map[string]any {
	ts := now.UnixMicro()
	switch ev.Type {
	case interp.EventStdout, interp.EventStderr:
		typ := lineStdout
		if ev.Type == interp.EventStderr {
			typ = lineStderr
		}
		return []map[string]any{{"type": typ, "text": ev.Text, "timestamp": ts}}
	case interp.EventResult, interp.EventDisplay:
		out := map[string]any{"type": lineResult, "is_main_result": ev.Type == interp.EventResult}
		for mime, v := range ev.Data {
			key, ok := resultKeys[mime]
			if !ok {
				key = mime
			}
			if mime == interp.MIMEJSON && json.Valid([]byte(v)) {
				out[key] = json.RawMessage(v)
				continue
			}
			out[key] = v
		}
		return []map[string]any{out}
	case interp.EventError:
		return []map[string]any{{"type": lineError, "name": ev.Name, "value": ev.Value, "traceback": strings.Join(ev.Traceback, "\n")}}
	case interp.EventEnd:
		return []map[string]any{{"type": lineCount, "execution_count": ev.ExecutionCount}}
	}
	return nil
}

// asciiJSON escapes every non-ASCII character of a JSON text as \uXXXX:
// the SDKs decode each chunk of the stream on its own, so a character
// split across two chunks would be garbled.
func asciiJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r < utf8.RuneSelf {
			out = append(out, b[0])
			b = b[1:]
			continue
		}
		b = b[n:]
		if r >= 0x10000 {
			r -= 0x10000
			out = appendU(out, 0xD800+(r>>10))
			out = appendU(out, 0xDC00+(r&0x3FF))
			continue
		}
		out = appendU(out, r)
	}
	return out
}

func appendU(out []byte, r rune) []byte {
	s := strconv.FormatInt(int64(r), 16)
	return append(append(out, `\u`+strings.Repeat("0", 4-len(s))...), s...)
}

// ndjson writes the lines of one execution as they come, flushed, with
// keepalives while nothing else comes.
type ndjson struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	last time.Time
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	n := &ndjson{w: w, rc: http.NewResponseController(w), last: time.Now()}
	_ = n.rc.Flush()
	return n
}

// send writes one line.
func (n *ndjson) send(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	_ = n.rc.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := n.w.Write(append(asciiJSON(b), '\n')); err == nil {
		_ = n.rc.Flush()
	}
	n.last = time.Now()
}

// keepalive sends a keepalive line when nothing was sent for a while.
func (n *ndjson) keepalive() {
	n.mu.Lock()
	idle := time.Since(n.last) >= keepaliveEvery
	n.mu.Unlock()
	if idle {
		n.send(map[string]any{"type": lineKeepalive})
	}
}
