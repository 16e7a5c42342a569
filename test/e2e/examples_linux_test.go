package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestExamples builds each program of examples/ and runs it against a
// server: each must exit 0 and print what it is about. The code example
// runs once the server has the code route.
func TestExamples(t *testing.T) {
	s := startServer(t, serverConfig{})
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	doc, err := s.client(t, keyA, client.Options{}).OpenAPI(ctx(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []struct{ name, want string }{
		{"quickstart", `stdout "42\n"`},
		{"files", "report.csv   sanitized"},
		{"stream", "event result"},
		{"background", `stdout "seen: first\nseen: second\nstopped\n"`},
		{"code", "result: 30"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			if ex.name == "code" && !strings.Contains(string(doc), `"/v1/sessions/{id}/code"`) {
				t.Log("not run: this server has no code route yet")
				return
			}
			dir := t.TempDir()
			exe := filepath.Join(dir, ex.name)
			if b, err := exec.Command(goBin, "build", "-o", exe, "github.com/airlock-sandbox/airlock/examples/"+ex.name).CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, b)
			}
			cmd := exec.Command(exe)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), client.EnvURL+"="+s.url, client.EnvKey+"="+keyA)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), ex.want) {
				t.Errorf("%s: %v, output:\n%s\nwant it to hold %q", ex.name, err, out, ex.want)
			}
		})
	}
}
