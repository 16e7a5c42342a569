package e2e_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
)

// lastText is the text/plain of a code call's last result.
func lastText(r api.CodeResult) string {
	text := ""
	for _, e := range r.Events {
		if e.Type == api.EventResult {
			text = e.Data["text/plain"]
		}
	}
	return text
}

// TestCode: through the SDK against a real airlock serve with the python
// image, state persists across code calls, a figure comes back as a PNG
// that decodes, output streams before the call ends, an interrupted call
// leaves the session and its state usable, and contexts are made, listed,
// restarted and removed.
func TestCode(t *testing.T) {
	home, err := testimage.Home()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
	s := startServer(t, serverConfig{home: home})
	c := s.client(t, keyA, client.Options{})
	cx := ctx(t, 5*time.Minute)
	sess, err := c.CreateSession(cx, api.CreateSession{Image: testimage.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(cx, sess.ID)
	run := func(code string, timeout float64) api.CodeResult {
		t.Helper()
		r, err := c.RunCode(cx, sess.ID, api.Code{Code: code, TimeoutSeconds: timeout})
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		return r
	}

	run("import pandas as pd\ndf = pd.DataFrame({'v': [1, 2, 3, 40]})", 0)
	if r := run("int(df.v.sum())", 0); lastText(r) != "46" || r.ExecutionCount != 2 {
		t.Errorf("state across calls: %q, count %d", lastText(r), r.ExecutionCount)
	}

	r := run("import matplotlib.pyplot as plt\ndf.v.plot()\nplt.show()", 0)
	pngs := 0
	for _, e := range r.Events {
		if b64 := e.Data["image/png"]; b64 != "" {
			raw, err := base64.StdEncoding.DecodeString(b64)
			if err == nil {
				_, err = png.Decode(bytes.NewReader(raw))
			}
			if err != nil {
				t.Errorf("the figure: %v", err)
			}
			pngs++
		}
	}
	if pngs != 1 {
		t.Errorf("a figure shown: %d PNGs in %+v", pngs, r.Events)
	}

	st, err := c.CodeStream(cx, sess.ID, api.Code{Code: "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')"})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var first, end time.Duration
	for st.Next() {
		e := st.Event()
		if e.Type == api.EventStdout && strings.Contains(e.Text, "first") && first == 0 {
			first = time.Since(t0)
		}
		if e.Type == api.EventEnd {
			end = time.Since(t0)
		}
	}
	st.Close()
	if err := st.Err(); err != nil || first == 0 || end == 0 || end-first < time.Second {
		t.Errorf("streamed output: first line at %v, end at %v, err %v; want the first line a second or more before the end", first, end, err)
	}

	r = run("while True: pass", 1)
	if !r.Interrupted {
		t.Errorf("an endless loop with a 1 s timeout: not interrupted: %+v", r)
	}
	if r := run("len(df)", 0); lastText(r) != "4" {
		t.Errorf("the state after an interrupted call: %q", lastText(r))
	}

	ctxInfo, err := c.CreateContext(cx, sess.ID, api.CreateContext{Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCode(cx, sess.ID, api.Code{Code: "var k = 6 * 7", Context: ctxInfo.ID}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.RunCode(cx, sess.ID, api.Code{Code: "k", Context: ctxInfo.ID}); err != nil || lastText(r) != "42" {
		t.Errorf("javascript state: %q %v", lastText(r), err)
	}
	list, err := c.ListContexts(cx, sess.ID)
	if err != nil || len(list) != 2 {
		t.Errorf("contexts: %+v %v, want the default python one and the javascript one", list, err)
	}
	if err := c.RestartContext(cx, sess.ID, ctxInfo.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := c.RunCode(cx, sess.ID, api.Code{Code: "typeof k", Context: ctxInfo.ID}); err != nil || lastText(r) != "'undefined'" {
		t.Errorf("after a restart: %q %v", lastText(r), err)
	}
	if err := c.DeleteContext(cx, sess.ID, ctxInfo.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCode(cx, sess.ID, api.Code{Code: "1", Context: ctxInfo.ID}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a removed context: %v, want not found", err)
	}
}
