package egress

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestAllowedHTTPS(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	code, body, err := f.get(t, f.client("http"), "https://api.allowed.test/hello")
	if err != nil || code != 200 || body != "hello from api.allowed.test over https\n" {
		t.Fatalf("GET through CONNECT: %d %q %v", code, body, err)
	}
	if d := f.world.dialed(); len(d) != 1 || d[0] != netip.MustParseAddrPort(apiAddr+":443") {
		t.Errorf("dials %v; want exactly the checked address %s:443", d, apiAddr)
	}
	f.proxy.Close()
	evs := f.proxy.Events()
	if len(evs) != 1 || !evs[0].Allowed || evs[0].Host != "api.allowed.test" || evs[0].Port != 443 || evs[0].BytesIn == 0 || evs[0].BytesOut == 0 {
		t.Errorf("events %+v; want one allowed event with traffic", evs)
	}
}

func TestAllowedHTTPKeepAlive(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	c := f.client("http")
	for _, u := range []string{"http://api.allowed.test/hello", "http://api.allowed.test/hello", "http://other.allowed.test/hello"} {
		code, body, err := f.get(t, c, u)
		want := "hello from " + strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/hello") + " over http\n"
		if err != nil || code != 200 || body != want {
			t.Fatalf("GET %s: %d %q %v; want %q", u, code, body, err, want)
		}
	}
	// Two hosts, so two decisions and two dials, though the client kept
	// one connection to the proxy.
	if _, dials := f.world.counts(); dials != 2 {
		t.Errorf("%d dials; want 2 (one per host)", dials)
	}
	if evs := f.proxy.Events(); len(evs) != 2 || evs[0].Host != "api.allowed.test" || evs[1].Host != "other.allowed.test" {
		t.Errorf("events %+v; want one per host", evs)
	}
	// A host change on the same connection gets its own decision.
	conn, br := f.raw(t, "GET http://api.allowed.test/hello HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	io.WriteString(conn, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("second request on the kept-alive connection: %v %v; want 403", resp, err)
	}
}

func TestHeadAndHopHeaders(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	_, br := f.raw(t, "GET http://api.allowed.test/headers HTTP/1.1\r\nHost: api.allowed.test\r\nProxy-Authorization: secret\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	got := string(b)
	if !strings.Contains(got, "X-Keep: 2") || strings.Contains(got, "Proxy-Authorization") || strings.Contains(got, "X-Drop") || strings.Contains(got, "User-Agent") {
		t.Errorf("origin saw headers %q; want X-Keep only, no hop-by-hop headers and no User-Agent", got)
	}
	req, _ := http.NewRequest(http.MethodHead, "http://api.allowed.test/bytes?n=1000", nil)
	resp, err = f.client("http").Do(req)
	if err != nil || resp.StatusCode != 200 || resp.ContentLength != 1000 {
		t.Fatalf("HEAD: %v %v; want 200 with Content-Length 1000", resp, err)
	}
	resp.Body.Close()
}

func TestDeniedNotListed(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	for _, tc := range []struct{ req, want string }{
		{"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n", "denied.test port 443 is not in the allowlist"},
		{"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n", "denied.test port 80 is not in the allowlist"},
		{"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n", "allowed.test port 443 is not in the allowlist"},
		{"CONNECT api.allowed.test:22 HTTP/1.1\r\n\r\n", "port 22 is not in the allowlist"},
		{"GET http://api.allowed.test:8080/ HTTP/1.1\r\n\r\n", "port 8080 is not in the allowlist"},
		{"GET http://api.allowed.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n", "does not name the request target"},
		{"CONNECT api.allowed.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n", "does not name the request target"},
		{"GET https://api.allowed.test/ HTTP/1.1\r\n\r\n", "use CONNECT for https"},
		{"GET /hello HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n", "not an absolute http:// URL"},
		{"GET http://user:pw@api.allowed.test/ HTTP/1.1\r\n\r\n", "'@'"},
		{"GET http://api.allowed.test%2f@denied.test/ HTTP/1.1\r\n\r\n", "'%'"},
		{"CONNECT api.allowed.test HTTP/1.1\r\n\r\n", "is not a number"},
		{"CONNECT api.allowed.test:0443 HTTP/1.1\r\n\r\n", "is not a number"},
	} {
		f.refused(t, tc.req, 403, tc.want)
	}
	f.refused(t, "GET http://api.allowed.test/ HTTP/1.1\r\nHost: api.allowed.test\r\nHost: denied.test\r\n\r\n", 400, "too many Host headers")
	f.refused(t, "BREW pot HTTP/1.1\r\n\r\n", 400, "invalid URI")
	f.refused(t, "\x16\x03\x01\x00\x05hello\r\n\r\n", 400, "malformed request")
	if lookups, dials := f.world.counts(); lookups != 0 || dials != 0 {
		t.Errorf("%d lookups and %d dials for refused requests; want none", lookups, dials)
	}
	// Go's own client sees the refusal too.
	if _, _, err := f.get(t, f.client("http"), "https://denied.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("GET https://denied.test/: %v; want Forbidden", err)
	}
	for _, ev := range f.proxy.Events() {
		if ev.Allowed {
			t.Errorf("allowed event %+v among refusals", ev)
		}
	}
}

func TestIPLiteralsDenied(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	for _, host := range []string{
		"127.0.0.1", "127.1", "0x7f.1", "0x7f000001", "2130706433", "0177.0.0.1", "017700000001", "127.000.000.001",
		"169.254.169.254", "0xa9fea9fe", "2852039166", "11.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
		"[64:ff9b::7f00:1]", "[fe80::1%25eth0]", "[2606:4700:4700::1111]", "0", "0.0.0.0", "127.0.0.1.",
	} {
		f.refused(t, "CONNECT "+host+":443 HTTP/1.1\r\n\r\n", 403, "")
		f.refused(t, "GET http://"+host+"/ HTTP/1.1\r\n\r\n", 403, "")
	}
	f.refused(t, "CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n", 403, "IP literal 127.0.0.1 is not allowed on port 443: only cidr rules allow addresses; allow it with --allow-host 127.0.0.1/32")
	f.refused(t, "CONNECT 0x7f.1:443 HTTP/1.1\r\n\r\n", 403, "IPv4 address 127.0.0.1 in a non-canonical notation")
	f.refused(t, "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", 403, "IPv4 address 127.0.0.1 in a non-canonical notation")
	if lookups, dials := f.world.counts(); lookups != 0 || dials != 0 {
		t.Errorf("%d lookups and %d dials for IP literals; want none (a literal is never looked up)", lookups, dials)
	}
}

func TestResolvesToNonPublic(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	for name, addrs := range map[string][]string{
		"private.allowed.test": {"10.0.0.5"},
		"loop.allowed.test":    {"127.0.0.1"},
		"meta.allowed.test":    {"169.254.169.254"},
		"v6loop.allowed.test":  {"::1"},
		"mapped.allowed.test":  {"::ffff:127.0.0.1"},
		"nat64.allowed.test":   {"64:ff9b::a9fe:a9fe"},
		"ula.allowed.test":     {"fd00::1"},
		"cgnat.allowed.test":   {"100.64.1.1"},
		"mixed.allowed.test":   {apiAddr, "192.168.0.1"},
	} {
		f.world.name(name, addrs...)
		f.refused(t, "CONNECT "+name+":443 HTTP/1.1\r\n\r\n", 403, name+" resolves to ")
		f.refused(t, "GET http://"+name+"/ HTTP/1.1\r\n\r\n", 403, name+" resolves to ")
	}
	f.refused(t, "CONNECT meta.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "169.254.169.254, which is link-local")
	f.refused(t, "CONNECT private.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "10.0.0.5, which is private (RFC 1918); allow it with --allow-host 10.0.0.5/32 (or --allow-cidr")
	f.refused(t, "CONNECT ula.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "allow it with --allow-host fd00::1/128")
	f.refused(t, "CONNECT nat64.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "NAT64 form of 169.254.169.254")
	f.refused(t, "CONNECT nowhere.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "cannot be resolved")
	if _, dials := f.world.counts(); dials != 0 {
		t.Errorf("%d dials; want none", dials)
	}
}

func TestCIDRRules(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{Allow: []sandbox.EgressRule{
		{Host: "*.allowed.test"},
		{CIDR: "11.0.0.0/24", Ports: []int{80}},
		{CIDR: "127.0.0.0/8", Ports: []int{443}},
	}})
	f.world.name("loop.allowed.test", "127.0.0.1")
	f.world.route("127.0.0.1:443", f.https.Listener.Addr().String())
	c := f.client("http")
	if code, body, err := f.get(t, c, "http://11.0.0.1/hello"); err != nil || code != 200 || body != "hello from 11.0.0.1 over http\n" {
		t.Errorf("literal allowed by cidr: %d %q %v", code, body, err)
	}
	f.refused(t, "GET http://11.0.0.1:443/ HTTP/1.1\r\n\r\n", 403, "not allowed on port 443")
	f.refused(t, "GET http://127.0.0.1/ HTTP/1.1\r\n\r\n", 403, "not allowed on port 80")
	f.refused(t, "GET http://0x0b.0.0.1/ HTTP/1.1\r\n\r\n", 403, "non-canonical")
	// An allowed name may resolve into a range that a cidr rule opens.
	conn, br := f.raw(t, "CONNECT loop.allowed.test:443 HTTP/1.1\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT loop.allowed.test with a cidr rule for 127.0.0.0/8: %v %v", resp, err)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "loop.allowed.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Errorf("TLS through the tunnel: %v", err)
	}
}

// connectTLS opens a CONNECT tunnel to target and runs a TLS handshake
// with the given client config through it.
func (f *fixture) connectTLS(t *testing.T, target string, cfg *tls.Config) error {
	t.Helper()
	conn, br := f.raw(t, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return tls.Client(conn, cfg).Handshake()
}

func TestSNIMustMatch(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	// The origin's certificate covers both names, so only the proxy can
	// stop these handshakes.
	if err := f.connectTLS(t, "api.allowed.test:443", &tls.Config{ServerName: "other.allowed.test", RootCAs: f.ca.pool()}); !isRefusedTLS(err) {
		t.Errorf("SNI other.allowed.test in a tunnel to api.allowed.test: %v; want refused", err)
	}
	f.event(t, `TLS server name "other.allowed.test" differs from the tunnel host api.allowed.test`)
	if err := f.connectTLS(t, "api.allowed.test:443", &tls.Config{ServerName: "denied.test", InsecureSkipVerify: true}); !isRefusedTLS(err) {
		t.Errorf("SNI denied.test: %v; want refused", err)
	}
	if err := f.connectTLS(t, "api.allowed.test:443", &tls.Config{InsecureSkipVerify: true}); !isRefusedTLS(err) {
		t.Errorf("no SNI: %v; want refused", err)
	}
	f.event(t, "has no server name")
	if _, dials := f.world.counts(); dials != 0 {
		t.Errorf("%d dials for refused handshakes; want none", dials)
	}
	// Plain HTTP through a tunnel is refused with a readable answer.
	conn, br := f.raw(t, "CONNECT api.allowed.test:80 HTTP/1.1\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 403 {
		t.Errorf("plain HTTP in a tunnel: %v %v; want 403", resp, err)
	}
	// The matching name works, in whatever case the client writes it.
	if err := f.connectTLS(t, "API.Allowed.Test.:443", &tls.Config{ServerName: "api.allowed.test", RootCAs: f.ca.pool()}); err != nil {
		t.Errorf("matching SNI: %v", err)
	}
}

func TestRebindingGetsOneLookup(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	f.world.name("rebind.allowed.test", apiAddr)
	f.world.rebind["rebind.allowed.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	if err := f.connectTLS(t, "rebind.allowed.test:443", &tls.Config{ServerName: "rebind.allowed.test", InsecureSkipVerify: true}); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	if d := f.world.dialed(); len(d) != 1 || d[0].Addr() != netip.MustParseAddr(apiAddr) {
		t.Errorf("dials %v; want the one checked address", d)
	}
	// The next decision looks the name up again and sees the new answer.
	f.refused(t, "CONNECT rebind.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "resolves to 127.0.0.1, which is loopback")
	if lookups, dials := f.world.counts(); lookups != 2 || dials != 1 {
		t.Errorf("%d lookups, %d dials; want 2 and 1", lookups, dials)
	}
}

func TestSOCKS5(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{})
	if code, body, err := f.get(t, f.client("socks5"), "https://socks.allowed.test/hello"); err != nil || code != 200 || body != "hello from socks.allowed.test over https\n" {
		t.Errorf("HTTPS through SOCKS5: %d %q %v", code, body, err)
	}
	for _, tc := range []struct {
		name string
		req  []byte
		code byte
	}{
		{"name not listed", socksReq(1, 3, append([]byte{11}, "denied.test"...), 443), socksNotAllowed},
		{"IPv4 literal", socksReq(1, 1, []byte{127, 0, 0, 1}, 443), socksNotAllowed},
		{"IPv6 literal", socksReq(1, 4, netip.IPv6Loopback().AsSlice(), 443), socksNotAllowed},
		{"literal as a name", socksReq(1, 3, append([]byte{10}, "2130706433"...), 443), socksNotAllowed},
		{"malformed name", socksReq(1, 3, append([]byte{8}, "a\x00b.test"...), 443), socksNotAllowed},
		{"UDP ASSOCIATE", socksReq(3, 1, []byte{0, 0, 0, 0}, 0), socksCmdNotSupp},
		{"BIND", socksReq(2, 3, append([]byte{16}, "api.allowed.test"...), 443), socksCmdNotSupp},
		{"address type 9", []byte{5, 1, 0, 9}, socksAtypNotSupp},
	} {
		_, br := f.raw(t, string(append([]byte{5, 1, 0}, tc.req...)))
		reply := make([]byte, 2)
		if _, err := io.ReadFull(br, reply); err != nil || reply[0] != 5 || reply[1] != 0 {
			t.Fatalf("%s: greeting answer %v %v", tc.name, reply, err)
		}
		if _, err := io.ReadFull(br, reply); err != nil || reply[1] != tc.code {
			t.Errorf("%s: reply %v %v; want code %d", tc.name, reply, err, tc.code)
		}
	}
	_, br := f.raw(t, "\x05\x01\x02")
	if reply, _ := io.ReadAll(br); string(reply) != "\x05\xff" {
		t.Errorf("greeting without no-auth: %q; want no acceptable method", reply)
	}
	if _, dials := f.world.counts(); dials != 1 {
		t.Errorf("%d dials; want 1 (the allowed request only)", dials)
	}
}

// socksReq builds a SOCKS5 request after the greeting.
func socksReq(cmd, atyp byte, addr []byte, port int) []byte {
	b := append([]byte{5, cmd, 0, atyp}, addr...)
	return append(b, byte(port>>8), byte(port))
}

func TestConnectionCap(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{MaxConnections: 1})
	conn, br := f.raw(t, "CONNECT api.allowed.test:443 HTTP/1.1\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first tunnel: %v %v", resp, err)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "api.allowed.test", RootCAs: f.ca.pool()})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	f.refused(t, "CONNECT api.allowed.test:443 HTTP/1.1\r\n\r\n", 403, "max_connections cap of 1 reached")
	f.refused(t, "GET http://api.allowed.test/hello HTTP/1.1\r\n\r\n", 403, "max_connections cap of 1 reached")
	tc.Close()
	// The slot comes back when the tunnel ends.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, err := f.get(t, f.client("http"), "http://api.allowed.test/hello")
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not given back: %d %v", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestByteCaps(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{MaxBytesIn: 1 << 20, MaxBytesOut: 1 << 20})
	c := f.client("http")
	if _, body, err := f.get(t, c, "https://api.allowed.test/bytes?n=4000000"); err == nil && len(body) == 4000000 {
		t.Errorf("downloaded %d bytes over HTTPS past a 1 MiB cap", len(body))
	}
	ev := f.event(t, "max_bytes_in cap of 1048576 bytes reached")
	if ev.Allowed || ev.Host != "api.allowed.test" {
		t.Errorf("cap event %+v", ev)
	}
	// The budget is for the session: plain HTTP gets nothing more.
	if code, body, err := f.get(t, c, "http://api.allowed.test/bytes?n=100"); err == nil && code == 200 && len(body) == 100 {
		t.Errorf("plain HTTP after the inbound cap: %d, %d bytes", code, len(body))
	}
	g := newFixture(t, sandbox.NetworkPolicy{MaxBytesOut: 1 << 20})
	resp, err := g.client("http").Post("http://api.allowed.test/echo", "application/octet-stream", io.LimitReader(zeros{}, 3<<20))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.HasPrefix(string(b), "3145728 <nil>") {
			t.Errorf("uploaded 3 MiB past a 1 MiB cap")
		}
	}
	g.event(t, "max_bytes_out cap of 1048576 bytes reached")
}

func TestLifetimeCap(t *testing.T) {
	f := newFixture(t, sandbox.NetworkPolicy{MaxConnDuration: sandbox.Duration(300 * time.Millisecond)})
	for _, u := range []string{"https://api.allowed.test/slow", "http://api.allowed.test/slow"} {
		resp, err := f.client("http").Get(u)
		if err != nil {
			continue // cut before the response head: as good as later
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("GET %s: an endless body ended cleanly; want it cut", u)
		}
	}
	f.event(t, "max_conn_duration cap of 300ms reached")
}

func TestServeStopsAndCloses(t *testing.T) {
	p, err := New(Options{Policy: sandbox.NetworkPolicy{Allow: []sandbox.EgressRule{{Host: "example.test"}}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://example.test/ HTTP/1.1\r\n") // an unfinished head
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client connection after Serve returned: %v; want EOF", err)
	}
	if err := p.Close(); err != nil || p.Close() != nil {
		t.Errorf("Close is not idempotent: %v", err)
	}
	if err := p.Serve(context.Background(), l); err == nil {
		t.Errorf("Serve after Close succeeded")
	}
}

func TestEnv(t *testing.T) {
	env := Env("127.0.0.1:3128")
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		if env[k] != "http://127.0.0.1:3128" {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	if v, ok := env["NO_PROXY"]; !ok || v != "" || env["no_proxy"] != "" || len(env) != 8 {
		t.Errorf("env %v; want NO_PROXY and no_proxy present and empty, 8 variables", env)
	}
}

// blockingResolver answers no lookup until its context ends.
type blockingResolver struct{ called, ended chan error }

func (r blockingResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	r.called <- nil
	<-ctx.Done()
	r.ended <- ctx.Err()
	return nil, ctx.Err()
}

func TestCloseCancelsLookups(t *testing.T) {
	r := blockingResolver{called: make(chan error, 1), ended: make(chan error, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, addr := startProxy(t, Options{Policy: sandbox.NetworkPolicy{Allow: []sandbox.EgressRule{{Host: "slow.test"}}}, Hooks: Hooks{Resolver: r}}, l)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT slow.test:443 HTTP/1.1\r\n\r\n")
	<-r.called
	p.Close() // returns only once the handler has finished
	if err := <-r.ended; err != context.Canceled {
		t.Errorf("lookup ended with %v; want context.Canceled", err)
	}
}

func TestLogsDecisions(t *testing.T) {
	var buf testenv.Buffer
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, addr := startProxy(t, Options{
		Policy: sandbox.NetworkPolicy{Allow: []sandbox.EgressRule{{Host: "example.test"}}},
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
	}, l)
	f := &fixture{proxy: p, addr: addr}
	f.refused(t, "CONNECT denied.test:443 HTTP/1.1\r\n\r\n", 403, "not in the allowlist")
	p.Close()
	want := `level=WARN msg="egress decision" host=denied.test port=443 allowed=false reason="denied.test port 443 is not in the allowlist"`
	if !strings.Contains(buf.String(), want) {
		t.Errorf("log %q does not contain %q", buf.String(), want)
	}
}
