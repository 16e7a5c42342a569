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
	return sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: cmd})
}

// MemoryEndsSandbox checks how a gVisor sandbox meets its memory cap: the
// host's OOM killer ends the sentry, so the process's Result says
// oom_killed with exit 137, the sandbox's Done closes with an error
// wrapping ErrDied, and it takes no more processes.
func MemoryEndsSandbox(t *testing.T, be sandbox.Backend, image sandbox.Image) {
	inst := backendtest.Create(t, be, image, backendtest.Policy(t, func(p *sandbox.Policy) { p.Limits.MemoryBytes = 64 << 20 }))
	res, err := run(t, inst, "python3", "-c", "x = bytearray(128 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')")
	if err != nil || !res.OOMKilled || res.ExitCode != sandbox.ExitOOM || strings.Contains(res.Stdout, "survived") {
		t.Fatalf("twice the memory cap: %v, oom_killed %v exit %d stdout %q", err, res.OOMKilled, res.ExitCode, res.Stdout)
	}
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed after the sandbox's OOM")
	}
	if !errors.Is(inst.Err(), sandbox.ErrDied) {
		t.Errorf("Err after the OOM: %v, want ErrDied", inst.Err())
	}
	if _, err := run(t, inst, "true"); !errors.Is(err, sandbox.ErrDied) {
		t.Errorf("a process after the OOM: %v, want ErrDied", err)
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
