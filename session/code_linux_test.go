package session_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// dataManager is a Manager that serves the built python image.
func dataManager(t *testing.T, edit func(*session.Options)) *session.Manager {
	t.Helper()
	store := testimage.Store(t)
	return newManager(t, func(o *session.Options) {
		o.Images = store
		if edit != nil {
			edit(o)
		}
	})
}

func code(t *testing.T, s *session.Session, req session.CodeRequest) session.CodeResult {
	t.Helper()
	x, err := s.Code(context.Background(), req, nil)
	if err != nil {
		t.Fatalf("code %q: %v", req.Code, err)
	}
	return x
}

// py runs a python cell in the session's default context.
func py(t *testing.T, s *session.Session, src string) session.CodeResult {
	t.Helper()
	return code(t, s, session.CodeRequest{Code: src})
}

func resultText(x session.CodeResult) string {
	if len(x.Results) == 0 {
		return ""
	}
	return x.Results[len(x.Results)-1][interp.MIMEText]
}

// TestSessionCode: the steps of an agent in one session: state persists
// between code calls, a DataFrame comes back as HTML and a figure as a PNG
// that decodes, a file uploaded mid-session is seen by the code, an
// endless loop is interrupted and a fork bomb stopped with the session
// (and, after the loop, the state) still there.
func TestSessionCode(t *testing.T) {
	m := dataManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, session.CreateOptions{Owner: "o", Image: testimage.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)

	py(t, s, "x = 41")
	x := py(t, s, "x + 1")
	if resultText(x) != "42" || x.ExecutionCount != 2 || x.Context != interp.Python {
		t.Errorf("x + 1 after x = 41: %q, count %d, context %q", resultText(x), x.ExecutionCount, x.Context)
	}

	x = py(t, s, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3.5, 4.5]})")
	if len(x.Results) == 0 || !strings.Contains(x.Results[0][interp.MIMEHTML], "<table") {
		t.Errorf("a DataFrame as the last expression: %+v", x.Results)
	}

	x = py(t, s, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
	var pngs int
	for _, e := range x.Events {
		if b64 := e.Data[interp.MIMEPNG]; b64 != "" {
			raw, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatalf("figure: %v", err)
			}
			if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
				t.Fatalf("figure: not a PNG: %v", err)
			}
			pngs++
		}
	}
	if pngs != 1 {
		t.Errorf("one figure shown, %d PNGs in %+v", pngs, x.Events)
	}

	if _, err := s.Put(ctx, "/workspace/input/note.txt", strings.NewReader("uploaded mid-session"), 0); err != nil {
		t.Fatal(err)
	}
	if x := py(t, s, "open('/workspace/input/note.txt').read()"); resultText(x) != "'uploaded mid-session'" {
		t.Errorf("the uploaded file from code: %q", resultText(x))
	}

	x = code(t, s, session.CodeRequest{Code: "while True: pass", Timeout: time.Second})
	if !x.Interrupted || x.Error == nil || x.Error.Name != "KeyboardInterrupt" {
		t.Errorf("an endless loop with a 1 s timeout: interrupted %v, error %+v", x.Interrupted, x.Error)
	}
	if x := py(t, s, "x"); resultText(x) != "41" {
		t.Errorf("x after the interrupted call: %q (restarted %v)", resultText(x), x.Restarted)
	}

	code(t, s, session.CodeRequest{Code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", Timeout: 2 * time.Second})
	if x := py(t, s, "6 * 7"); resultText(x) != "42" {
		t.Errorf("after a fork bomb: %q, error %+v", resultText(x), x.Error)
	}
	if res := exec(t, s, "echo still here"); res.Stdout != "still here\n" {
		t.Errorf("a command after the fork bomb: %+v", res)
	}
}

// TestSessionContexts: named contexts of three languages keep their own
// state; a restart forgets it; a removed context is gone; a bad language
// is refused.
func TestSessionContexts(t *testing.T) {
	m := dataManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, session.CreateOptions{Owner: "o", Image: testimage.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	ids := map[string]string{}
	for _, lang := range []string{"python", "javascript", "bash"} {
		c, err := s.CreateContext(ctx, lang, "/tmp")
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		ids[lang] = c.ID
	}
	code(t, s, session.CodeRequest{Context: ids["python"], Code: "v = 'py'"})
	code(t, s, session.CodeRequest{Context: ids["javascript"], Code: "var v = 'js'"})
	code(t, s, session.CodeRequest{Context: ids["bash"], Code: "v=sh"})
	for lang, want := range map[string]string{"python": "'py'", "javascript": "'js'"} {
		if x := code(t, s, session.CodeRequest{Context: ids[lang], Code: "v"}); resultText(x) != want {
			t.Errorf("%s: v is %q, want %q", lang, resultText(x), want)
		}
	}
	if x := code(t, s, session.CodeRequest{Context: ids["bash"], Code: "echo $v; pwd"}); x.Stdout != "sh\n/tmp\n" {
		t.Errorf("bash: %q", x.Stdout)
	}
	if got := len(s.Contexts()); got != 3 {
		t.Errorf("%d contexts listed, want 3", got)
	}
	if err := s.RestartContext(ctx, ids["python"]); err != nil {
		t.Fatal(err)
	}
	if x := code(t, s, session.CodeRequest{Context: ids["python"], Code: "v"}); x.Error == nil || x.Error.Name != "NameError" {
		t.Errorf("v after a restart: %+v", x.Error)
	}
	if err := s.RemoveContext(ctx, ids["bash"]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Code(ctx, session.CodeRequest{Context: ids["bash"], Code: "true"}, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a removed context: %v, want ErrNotFound", err)
	}
	if _, err := s.CreateContext(ctx, "cobol", ""); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("language cobol: %v, want ErrInvalid", err)
	}
}

// TestWarmDataPool: a pooled session of the python image comes with its
// interpreter running and the data libraries imported.
func TestWarmDataPool(t *testing.T) {
	m := dataManager(t, func(o *session.Options) {
		o.Pools = []session.PoolSpec{{Backend: "native", Image: testimage.Name, Size: 1, Warm: session.WarmPython(session.DataPreload)}}
	})
	ctx := context.Background()
	for deadline := time.Now().Add(2 * time.Minute); m.PoolReady() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not fill in 2 minutes")
		}
	}
	s, err := m.Create(ctx, session.CreateOptions{Owner: "o", Image: testimage.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	if !s.Info().Pooled {
		t.Fatal("the session did not come from the pool")
	}
	if cs := s.Contexts(); len(cs) != 1 || cs[0].ID != interp.Python {
		t.Errorf("contexts of a pooled session: %+v", cs)
	}
	x := py(t, s, "import sys\nsorted(m for m in ('pandas', 'numpy', 'matplotlib.pyplot', 'openpyxl') if m in sys.modules)")
	if got := resultText(x); got != "['matplotlib.pyplot', 'numpy', 'openpyxl', 'pandas']" {
		t.Errorf("modules loaded before the first call: %s (error %+v)", got, x.Error)
	}
	if x := py(t, s, "pd.DataFrame({'a': [1, 2, 3]}).describe().loc['mean', 'a']"); resultText(x) != "2.0" {
		t.Errorf("describe in the first calls: %q (error %+v)", resultText(x), x.Error)
	}
}

// TestSessionsUnderLoad: 50 sessions at once, 20 interpreter calls each,
// with no error; what they leave is checked by TestMain's leak check.
func TestSessionsUnderLoad(t *testing.T) {
	const sessions, calls = 50, 20
	m := dataManager(t, func(o *session.Options) { o.MaxSessions = sessions })
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for k := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- loadSession(ctx, m, k, calls)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(m.List("")); n != 0 {
		t.Errorf("%d sessions left", n)
	}
}

func loadSession(ctx context.Context, m *session.Manager, k, calls int) error {
	s, err := m.Create(ctx, session.CreateOptions{Owner: fmt.Sprint("tenant", k%5), Image: testimage.Name})
	if err != nil {
		return fmt.Errorf("session %d: %w", k, err)
	}
	defer s.Destroy(ctx)
	for c := range calls {
		x, err := s.Code(ctx, session.CodeRequest{Code: fmt.Sprintf("n = %d if %d == 0 else n + 1\nn", k*1000, c)}, nil)
		if err != nil {
			return fmt.Errorf("session %d, call %d: %w", k, c, err)
		}
		if want := fmt.Sprint(k*1000 + c); resultText(x) != want || x.Error != nil {
			return fmt.Errorf("session %d, call %d: %q, want %s (error %+v)", k, c, resultText(x), want, x.Error)
		}
	}
	return s.Destroy(ctx)
}
