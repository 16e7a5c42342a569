package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testsession"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/tools"
)

func TestMain(m *testing.M) {
	os.Exit(backendtest.Main(m, func() []string { return nil }))
}

// newKit opens a python session with a short timeout and a kit on it.
func newKit(t *testing.T) *tools.Kit {
	t.Helper()
	m := testsession.Manager(t, nil)
	s := testsession.Python(t, m, sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(20 * time.Second)}})
	if _, err := s.Put(context.Background(), "/workspace/input/data.csv", strings.NewReader("a,b\n1,2\n"), 0); err != nil {
		t.Fatal(err)
	}
	return tools.NewKit(tools.Local(s), tools.Env{Image: testsession.Image, Limits: s.Policy().Limits}, tools.Options{OutputCap: 1024})
}

// newRemoteKit is newKit over tools.Remote: the session is one of an
// airlock server (the HTTP API over a Manager of this process), reached
// through the client.
func newRemoteKit(t *testing.T) *tools.Kit {
	t.Helper()
	m := testsession.Manager(t, nil)
	srv, err := server.New(server.Options{Manager: m, RateLimit: 1e6}) // one tenant, no keys
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	pol := sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(20 * time.Second)}}
	s, err := c.CreateSession(ctx, api.CreateSession{Image: testsession.Image, Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	sb := tools.Remote(c, s.ID)
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroying the session: %v", err)
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("a second destroy: %v", err)
		}
	})
	if _, err := sb.Put(ctx, "/workspace/input/data.csv", strings.NewReader("a,b\n1,2\n"), 0); err != nil {
		t.Fatal(err)
	}
	return tools.NewKit(sb, tools.Env{Image: testsession.Image, Limits: s.Limits}, tools.Options{OutputCap: 1024})
}

// bothKits runs f over a Local kit and over a Remote one.
func bothKits(t *testing.T, f func(t *testing.T, k *tools.Kit, remote bool)) {
	t.Run("local", func(t *testing.T) { f(t, newKit(t), false) })
	t.Run("remote", func(t *testing.T) { f(t, newRemoteKit(t), true) })
}

func call(t *testing.T, k *tools.Kit, name string, args any) tools.Observation {
	t.Helper()
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	obs, err := k.Call(context.Background(), name, raw)
	if err != nil {
		t.Fatalf("%s %s: %v", name, raw, err)
	}
	return obs
}

func expect(t *testing.T, what string, obs tools.Observation, isErr bool, wants ...string) {
	t.Helper()
	if obs.IsError != isErr {
		t.Errorf("%s: IsError %v, want %v: %s", what, obs.IsError, isErr, obs.Text)
	}
	for _, w := range wants {
		if !strings.Contains(obs.Text, w) {
			t.Errorf("%s: observation lacks %q:\n%s", what, w, obs.Text)
		}
	}
}

// TestCommandsAndFiles runs the command and file tools against a real
// python sandbox: exit statuses, shortened output, timeouts, the folders
// that are writable, reading in pieces, images, listings and verdicts.
func TestCommandsAndFiles(t *testing.T) { bothKits(t, commandsAndFiles) }

func commandsAndFiles(t *testing.T, k *tools.Kit, remote bool) {
	expect(t, "echo", call(t, k, tools.RunCommand, map[string]any{"command": "echo hi; echo oops >&2; exit 3"}), true,
		"exit 3", "--- stdout ---\nhi", "--- stderr ---\noops")
	long := call(t, k, tools.RunCommand, map[string]any{"command": "seq 1 100000"})
	expect(t, "seq", long, false, "exit 0", "\n1\n2\n", "elided …]", "\n100000")
	if len(long.Text) > 1400 {
		t.Errorf("a long output took %d bytes of the observation", len(long.Text))
	}
	expect(t, "timeout", call(t, k, tools.RunCommand, map[string]any{"command": "sleep 30", "timeout_seconds": 1}), true,
		"timed out: killed at the 1s timeout")

	expect(t, "write", call(t, k, tools.WriteFile, map[string]any{"path": "output/notes/a.md", "content": "# hi\n"}), false,
		"wrote /workspace/output/notes/a.md", "new or changed in /workspace/output: notes/a.md")
	expect(t, "read", call(t, k, tools.ReadFile, map[string]any{"path": "/workspace/output/notes/a.md"}), false, "# hi")
	expect(t, "read input", call(t, k, tools.ReadFile, map[string]any{"path": "input/data.csv"}), false, "a,b\n1,2")
	expect(t, "write input", call(t, k, tools.WriteFile, map[string]any{"path": "input/x.txt", "content": "x"}), true, "read-only")
	expect(t, "write outside", call(t, k, tools.WriteFile, map[string]any{"path": "/etc/passwd", "content": "x"}), true, "outside what the file tools reach")
	expect(t, "read missing", call(t, k, tools.ReadFile, map[string]any{"path": "/tmp/nope"}), true, "not found")

	big := strings.Repeat("0123456789abcdef", 4096) // 64 KiB
	call(t, k, tools.WriteFile, map[string]any{"path": "/tmp/big.txt", "content": big})
	part := call(t, k, tools.ReadFile, map[string]any{"path": "/tmp/big.txt"})
	expect(t, "read capped", part, false, "bytes 0 to 32768 of 65536; read on with offset 32768")
	expect(t, "read on", call(t, k, tools.ReadFile, map[string]any{"path": "/tmp/big.txt", "offset": 32768}), false, "bytes 32768 to 65536 of 65536]")

	var png bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 30, 20))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	if err := pngEncode(&png, img); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Sandbox().Put(context.Background(), "/workspace/output/dot.png", &png, 0); err != nil {
		t.Fatal(err)
	}
	pic := call(t, k, tools.ReadFile, map[string]any{"path": "output/dot.png"})
	expect(t, "read png", pic, false, "image/png 30×20")
	if len(pic.Images) != 1 || pic.Images[0].Width != 30 {
		t.Errorf("read_file of a PNG gave images %+v", pic.Images)
	}
	call(t, k, tools.RunCommand, map[string]any{"command": "head -c 3000 /dev/urandom > /tmp/blob"})
	if remote { // a server lets a file out only through its artifact filter
		expect(t, "read binary", call(t, k, tools.ReadFile, map[string]any{"path": "/tmp/blob"}), true, "the artifact filter rejected /tmp/blob")
	} else {
		expect(t, "read binary", call(t, k, tools.ReadFile, map[string]any{"path": "/tmp/blob"}), false, "binary", "not shown")
	}
	expect(t, "read folder", call(t, k, tools.ReadFile, map[string]any{"path": "/workspace/output/notes"}), true, "invalid argument")

	call(t, k, tools.RunCommand, map[string]any{"command": "printf '=1+1,x\\n' > output/formula.csv; echo '<script>alert(1)</script>' > output/page.html; ln -s /etc/passwd output/link.txt"})
	expect(t, "list", call(t, k, tools.ListFiles, "{}"), false,
		"/workspace/input (read-only):\n  data.csv  8 B", "/workspace/output:", "notes/\n", "notes/a.md  5 B", "dot.png", "link.txt -> /etc/passwd")
	expect(t, "artifacts", call(t, k, tools.ListArtifacts, ""), false,
		"formula.csv", "sanitized", "link.txt", "rejected", "notes/a.md  5 B  accepted")
}

func pngEncode(b *bytes.Buffer, img image.Image) error { return png.Encode(b, img) }

// TestBadCalls: unknown tools, malformed, mistyped, missing and huge
// arguments, and timeouts out of range each get a clear tool error.
func TestBadCalls(t *testing.T) {
	k := newKit(t)
	for _, c := range []struct{ name, args, want string }{
		{"rm_rf", "{}", `there is no tool "rm_rf"; the tools are run_code, run_command`},
		{tools.RunCommand, `{"command": "ls"`, "not a valid JSON object"},
		{tools.RunCommand, `["ls"]`, "not a valid JSON object"},
		{tools.RunCommand, `{"command": 7}`, "command must be a string, not number"},
		{tools.RunCommand, `{}`, "run_command needs a command"},
		{tools.RunCode, `{"language": "cobol", "code": "x"}`, `language "cobol"`},
		{tools.WriteFile, `{"path": "output/a"}`, "write_file needs path and content"},
		{tools.RunCommand, `{"command": "ls", "timeout_seconds": -1}`, "timeout_seconds -1 is out of range"},
		{tools.RunCommand, `{"command": "ls", "timeout_seconds": 1e9}`, "out of range: a call may run from 0 to 20s"},
		{tools.WriteFile, `{"path": "output/a", "content": "` + strings.Repeat("x", tools.DefaultMaxArgs) + `"}`, "over the 524.3 KB a call may take"},
	} {
		expect(t, c.name+" "+c.args[:min(len(c.args), 40)], call(t, k, c.name, c.args), true, c.want)
	}
}

// TestRunCode: code runs statefully per language, the last expression
// and figures come back (figures as images), errors carry the last frames
// of their traceback, and a cell over its timeout is interrupted while
// the context survives.
func TestRunCode(t *testing.T) { bothKits(t, runCode) }

func runCode(t *testing.T, k *tools.Kit, _ bool) {
	expect(t, "define", call(t, k, tools.RunCode, map[string]any{"code": "import math\nx = 21\ndef f(n):\n    return 1 / n"}), false)
	expect(t, "state", call(t, k, tools.RunCode, map[string]any{"code": "print(x * 2)\nmath.sqrt(x * x)"}), false,
		"--- stdout ---\n42", "result: 21.0")
	fig := call(t, k, tools.RunCode, map[string]any{"code": "import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3))\nplt.plot([1, 3, 2])\nplt.show()"})
	expect(t, "figure", fig, false, "[image 1: image/png ", "images are not shown to you")
	if len(fig.Images) != 1 || fig.Images[0].MIME != "image/png" || !bytes.HasPrefix(fig.Images[0].Data, []byte("\x89PNG")) {
		t.Errorf("the figure's images: %d", len(fig.Images))
	}
	deep := "def g(n):\n    return g(n - 1) if n > 0 else f(0)\ng(30)"
	obs := call(t, k, tools.RunCode, map[string]any{"code": deep})
	expect(t, "error", obs, true, "error: ZeroDivisionError: division by zero", "lines of earlier frames left out")
	if strings.Contains(obs.Text, "\x1b") || strings.Count(obs.Text, "\n") > 20 {
		t.Errorf("the traceback is not short and plain:\n%s", obs.Text)
	}
	start := time.Now()
	expect(t, "timeout", call(t, k, tools.RunCode, map[string]any{"code": "while True:\n    pass", "timeout_seconds": 1}), true,
		"interrupted: the call ran past its timeout")
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("an interrupted cell took %v", took)
	}
	expect(t, "after the timeout", call(t, k, tools.RunCode, map[string]any{"code": "print('alive', x)"}), false, "alive 21")
	expect(t, "javascript", call(t, k, tools.RunCode, map[string]any{"language": "javascript", "code": "let y = 6; console.log(y * 7)"}), false, "42")
	expect(t, "javascript state", call(t, k, tools.RunCode, map[string]any{"language": "javascript", "code": "console.log(y + 1)"}), false, "7")
	expect(t, "bash", call(t, k, tools.RunCode, map[string]any{"language": "bash", "code": "cd /tmp; Z=5"}), false)
	expect(t, "bash state", call(t, k, tools.RunCode, map[string]any{"language": "bash", "code": "echo $Z $(pwd)"}), false, "5 /tmp")
	expect(t, "bash exit", call(t, k, tools.RunCode, map[string]any{"language": "bash", "code": "false"}), true, "error: ExitCode")
	expect(t, "writes", call(t, k, tools.RunCode, map[string]any{"code": "open('/workspace/output/r.txt', 'w').write('hi')"}), false,
		"result: 2", "new or changed in /workspace/output: r.txt (2 B)")
}
