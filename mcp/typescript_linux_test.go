package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
)

// nodeClient finds node and the installed TypeScript SDK, or skips (fails
// under CI).
func nodeClient(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	testenv.Require(t, "node (Debian's nodejs)", err)
	dir, _ := filepath.Abs("../test/mcp")
	_, err = os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	testenv.Require(t, "the MCP TypeScript SDK (npm ci in test/mcp)", err)
	return node, filepath.Join(dir, "client.mjs")
}

// runClient runs the TypeScript client and checks its report.
func runClient(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
	out, err := cmd.Output()
	var rep struct {
		OK     bool     `json:"ok"`
		Checks []string `json:"checks"`
		Error  string   `json:"error"`
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil || err != nil || !rep.OK {
		t.Fatalf("the TypeScript client failed: %v\n%s\nchecks passed: %v\nstdout: %s\nstderr: %s", err, rep.Error, rep.Checks, out, stderr.String())
	}
	if len(rep.Checks) < 20 {
		t.Errorf("the client made %d checks: %v", len(rep.Checks), rep.Checks)
	}
	t.Logf("the TypeScript client's checks: %s", strings.Join(rep.Checks, "; "))
}

// TestTypeScriptClientStdio: the official TypeScript SDK starts the
// server over stdio (this test binary) and runs the whole check list;
// when it closes, the server destroys its sessions and exits 0.
func TestTypeScriptClientStdio(t *testing.T) {
	node, script := nodeClient(t)
	testenv.Require(t, "root: sessions run native sandboxes as root here", testenv.Root())
	testimage.Store(t)
	cmd := exec.Command(node, script, "stdio", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveStdioEnv+"=1")
	runClient(t, cmd)
}

// TestTypeScriptClientHTTP: the same check list over streamable HTTP
// with an API key.
func TestTypeScriptClientHTTP(t *testing.T) {
	node, script := nodeClient(t)
	hs, m := httpServer(t, 0)
	runClient(t, exec.Command(node, script, "http", hs.URL, aliceKey))
	if n := len(m.List("alice")); n != 0 {
		t.Errorf("%d of alice's sessions alive after she destroyed hers", n)
	}
}
