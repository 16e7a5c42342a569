package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
)

// TestExamples builds each program of examples/ and runs it against a
// server: each must exit 0 and print what it is about. The code example
// draws a figure with matplotlib, so the server has the python image.
func TestExamples(t *testing.T) {
	home, err := testimage.Home()
	testenv.Require(t, "the python image (bash .ci/lib/image.sh)", err)
	s := startServer(t, serverConfig{home: home})
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, ex := range []struct{ name, want string }{
		{"quickstart", `stdout "42\n"`},
		{"files", "report.csv   sanitized"},
		{"stream", "event result"},
		{"background", `stdout "seen: first\nseen: second\nstopped\n"`},
		{"code", "result: 30"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, ex.name)
			if b, err := exec.Command(goBin, "build", "-o", exe, "github.com/airlock-sandbox/airlock/examples/"+ex.name).CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, b)
			}
			cmd := exec.Command(exe)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), client.EnvURL+"="+s.url, client.EnvKey+"="+keyA)
			if ex.name == "code" {
				cmd.Env = append(cmd.Env, "AIRLOCK_IMAGE="+testimage.Name)
			}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), ex.want) {
				t.Errorf("%s: %v, output:\n%s\nwant it to hold %q", ex.name, err, out, ex.want)
			}
		})
	}
}
