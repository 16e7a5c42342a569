package containertest

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func run(t *testing.T, inst sandbox.Instance, cmd ...string) (sandbox.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return inst.Exec(ctx, sandbox.ExecRequest{Cmd: cmd})
}

// MemoryEndsSandbox checks how a gVisor sandbox meets its memory cap: the
// host's OOM killer ends the sentry, so the command's Result says
// oom_killed with exit 137, and the sandbox is destroyed.
func MemoryEndsSandbox(t *testing.T, be sandbox.Backend, image string) {
	inst := backendtest.Create(t, be, image, backendtest.Policy(t, func(p *sandbox.Policy) { p.Limits.MemoryBytes = 64 << 20 }))
	res, err := run(t, inst, "python3", "-c", "x = bytearray(128 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')")
	if err != nil || !res.OOMKilled || res.ExitCode != sandbox.ExitOOM || strings.Contains(res.Stdout, "survived") {
		t.Fatalf("twice the memory cap: %v, oom_killed %v exit %d stdout %q", err, res.OOMKilled, res.ExitCode, res.Stdout)
	}
	if _, err := run(t, inst, "true"); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("a command after the OOM: %v, want ErrDestroyed", err)
	}
}

// OwnFolders lists, as leftovers, the sandbox folders under base that
// this test process owns (hostdir names them after their owner).
func OwnFolders(base string) []string {
	var out []string
	dirs, _ := filepath.Glob(filepath.Join(base, hostdir.Owner()+"-*"))
	for _, d := range dirs {
		out = append(out, "folder "+d)
	}
	return out
}
