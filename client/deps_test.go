package client_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/airlock-sandbox/airlock"

// allowedDeps are the packages of ours that the client may link: the wire
// types and the public types they use. Anything else of ours (a backend,
// the server, the session manager, egress, artifact, image…) would drag a
// sandbox runtime into every program that talks to a server.
var allowedDeps = map[string]bool{
	module + "/api":     true,
	module + "/sandbox": true,
	module + "/client":  true,
}

// TestDeps walks what the client package links, as tailscale's deptest
// does, on each system a client may be built for: the standard library,
// api and sandbox, and nothing else (no module from outside either; the
// golang.org/x packages the standard library vendors are part of it).
func TestDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", module+"/client")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("GOOS=%s go list -deps: %v\n%s", goos, err, stderr)
		}
		n := 0
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, std, _ := strings.Cut(line, " ")
			n++
			if std == "true" || allowedDeps[pkg] {
				continue
			}
			t.Errorf("GOOS=%s: the client links %s; it may link only the standard library, api and sandbox", goos, pkg)
		}
		if n < 10 || !strings.Contains(string(out), module+"/api ") {
			t.Errorf("GOOS=%s: go list -deps printed %d packages, without api: the check checks nothing", goos, n)
		}
	}
}
