package egress

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// curl runs the real curl client through the proxy and returns its exit
// status and output; -w appends the HTTP status of the last response.
func (f *fixture) curl(t *testing.T, proxy string, args ...string) (int, string) {
	t.Helper()
	path, err := exec.LookPath("curl")
	testenv.Require(t, "curl (apt-get install curl), for the curl client tests", err)
	base := []string{"-sS", "--max-time", "20", "--proxy", proxy, "--cacert", f.ca.pemFile(t), "-w", "\nstatus=%{http_code}"}
	cmd := exec.Command(path, append(base, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

func TestCurl(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	httpProxy, socks := "http://"+f.addr, "socks5h://"+f.addr
	for _, tc := range []struct {
		name  string
		proxy string
		args  []string
		code  int
		wants []string
	}{
		{"https allowed", httpProxy, []string{"https://api.allowed.test/hello"}, 0,
			[]string{"hello from api.allowed.test over https", "status=200"}},
		{"http allowed", httpProxy, []string{"http://api.allowed.test/hello"}, 0,
			[]string{"hello from api.allowed.test over http", "status=200"}},
		{"http HEAD", httpProxy, []string{"-I", "http://api.allowed.test/bytes?n=5"}, 0,
			[]string{"Content-Length: 5", "status=200"}},
		{"https through socks5h", socks, []string{"https://socks.allowed.test/hello"}, 0,
			[]string{"hello from socks.allowed.test over https", "status=200"}},
		{"https not listed", httpProxy, []string{"https://denied.test/"}, 56,
			[]string{"403"}},
		{"http not listed", httpProxy, []string{"http://denied.test/"}, 0,
			[]string{"airlock egress: denied.test port 80 is not in the allowlist", "status=403"}},
		{"http ip literal", httpProxy, []string{"http://169.254.169.254/latest/meta-data/"}, 0,
			[]string{"IP literal 169.254.169.254 is not allowed", "status=403"}},
		{"https ip literal", httpProxy, []string{"-k", "https://127.0.0.1/"}, 56,
			[]string{"403"}},
		{"http hex literal", httpProxy, []string{"http://0x7f.1/"}, 0,
			[]string{"127.0.0.1", "status=403"}},
		{"http ipv6 literal", httpProxy, []string{"http://[::1]/"}, 0,
			[]string{"IP literal ::1 is not allowed", "status=403"}},
		{"socks5h not listed", socks, []string{"https://denied.test/"}, 97,
			[]string{"status=000"}},
		{"http plain through tunnel", httpProxy, []string{"--proxytunnel", "http://api.allowed.test/hello"}, 0,
			[]string{"tunnels carry TLS only", "status=403"}},
	} {
		code, out := f.curl(t, tc.proxy, tc.args...)
		ok := code == tc.code
		for _, w := range tc.wants {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("%s: curl exit %d, output:\n%s\nwant exit %d and %q", tc.name, code, out, tc.code, tc.wants)
		}
	}
	if _, dials := f.world.counts(); dials != 4 {
		t.Errorf("%d dials; want 4 (the allowed requests only)", dials)
	}
}
