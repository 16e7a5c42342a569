package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// runJSON runs airlock run --json in-process and reads the Result; the
// exit status must be the command's own.
func runJSON(t *testing.T, args ...string) sandbox.Result {
	t.Helper()
	out, errs, code := cliRun{}.run(t, append([]string{"run", "--json"}, args...)...)
	var res sandbox.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != res.ExitCode {
		t.Fatalf("airlock run --json %q: exit %d, %v\nstdout %s\nstderr %s", args, code, err, out, errs)
	}
	return res
}

// TestRunPrivateAddressHint: a host rule whose name resolves to a loopback
// address is refused with the rule that allows it; given that rule, the
// same request goes through, to a server on this host's loopback.
func TestRunPrivateAddressHint(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("needs curl in the host image: %v (CI installs it)", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") }))
	defer srv.Close()
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	args := []string{"--allow-host", "localhost:" + port}
	hint := regexp.MustCompile(`allow it with --allow-host (\S+) \(or --allow-cidr`)
	// localhost may resolve to ::1 and 127.0.0.1: each refusal names one.
	for range 3 {
		res := runJSON(t, append(args, "--", "curl", "-sS", "--max-time", "10", "http://localhost:"+port+"/")...)
		if res.Stdout == "hello from the host" {
			return
		}
		if len(res.Egress) == 0 || res.Egress[0].Allowed {
			t.Fatalf("with %q: stdout %q stderr %q egress %+v", args, res.Stdout, res.Stderr, res.Egress)
		}
		m := hint.FindStringSubmatch(res.Egress[0].Reason)
		if m == nil || !strings.Contains(res.Egress[0].Reason, "which is loopback") {
			t.Fatalf("refusal %q names no rule that allows it", res.Egress[0].Reason)
		}
		args = append(args, "--allow-host", m[1])
	}
	t.Errorf("with the suggested rules %q the request still fails", args)
}
