package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// testCA is a certificate authority made for one test run.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newTestCA(tb testing.TB) *testCA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock egress test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &testCA{cert: cert, key: key, der: der}
}

// leaf issues a server certificate for the given names.
func (ca *testCA) leaf(tb testing.TB, names ...string) tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// pemFile writes the CA certificate for curl and python.
func (ca *testCA) pemFile(tb testing.TB) string {
	path := filepath.Join(tb.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der}), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// world is the test's view of the Internet: a resolver that answers from a
// table and a dialler that maps the public addresses the proxy checked to
// real servers on the host's loopback. It counts every lookup and dial.
type world struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	rebind  map[string][]netip.Addr
	routes  map[netip.AddrPort]string
	lookups []string
	dials   []netip.AddrPort
}

func newWorld() *world {
	return &world{names: map[string][]netip.Addr{}, rebind: map[string][]netip.Addr{}, routes: map[netip.AddrPort]string{}}
}

// name sets the answer for a host name.
func (w *world) name(host string, addrs ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range addrs {
		w.names[host] = append(w.names[host], netip.MustParseAddr(a))
	}
}

// route sends dials of a checked address to a real server.
func (w *world) route(ap string, real string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.routes[netip.MustParseAddrPort(ap)] = real
}

func (w *world) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lookups = append(w.lookups, host)
	addrs, ok := w.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if next, ok := w.rebind[host]; ok {
		w.names[host] = next
	}
	return addrs, nil
}

func (w *world) Dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	w.mu.Lock()
	w.dials = append(w.dials, ap)
	real, ok := w.routes[ap]
	w.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("test world has no route to %s", ap)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", real)
}

func (w *world) counts() (lookups, dials int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lookups), len(w.dials)
}

func (w *world) dialed() []netip.AddrPort {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]netip.AddrPort(nil), w.dials...)
}

// testHandler serves the origin servers of the test world.
func testHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/hello":
		fmt.Fprintf(w, "hello from %s over %s\n", r.Host, map[bool]string{true: "https", false: "http"}[r.TLS != nil])
	case "/bytes":
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.CopyN(w, zeros{}, n)
	case "/echo":
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v\n", n, err)
	case "/slow":
		for {
			if _, err := w.Write([]byte("tick\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	case "/headers":
		r.Header.Write(w)
	default:
		http.NotFound(w, r)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// fixture is a running proxy in a test world with real origin servers.
type fixture struct {
	ca    *testCA
	world *world
	proxy *Proxy
	addr  string
	https *httptest.Server
	http  *httptest.Server
}

// Public addresses of the test world. The proxy checks them as public;
// the world's dialler takes them to the loopback servers.
const (
	apiAddr   = "11.0.0.1"
	otherAddr = "11.0.0.2"
)

// newFixture starts origin servers and a proxy with the given policy (the
// rule "*.allowed.test" when it lists none) on a loopback listener.
func newFixture(tb testing.TB, pol sandbox.NetworkPolicy) *fixture {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return newFixtureOn(tb, pol, l)
}

// newFixtureOn is newFixture with the proxy serving l.
func newFixtureOn(tb testing.TB, pol sandbox.NetworkPolicy, l net.Listener) *fixture {
	tb.Helper()
	f := &fixture{ca: newTestCA(tb), world: newWorld()}
	f.https = httptest.NewUnstartedServer(http.HandlerFunc(testHandler))
	f.https.TLS = &tls.Config{Certificates: []tls.Certificate{f.ca.leaf(tb, "api.allowed.test", "other.allowed.test", "socks.allowed.test")}}
	f.https.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	f.https.StartTLS()
	tb.Cleanup(f.https.Close)
	f.http = httptest.NewServer(http.HandlerFunc(testHandler))
	tb.Cleanup(f.http.Close)
	for _, a := range []string{apiAddr, otherAddr} {
		f.world.route(a+":443", f.https.Listener.Addr().String())
		f.world.route(a+":80", f.http.Listener.Addr().String())
	}
	f.world.name("api.allowed.test", apiAddr)
	f.world.name("other.allowed.test", otherAddr)
	f.world.name("socks.allowed.test", apiAddr)
	f.world.name("denied.test", apiAddr)
	f.world.name("allowed.test", apiAddr)
	if len(pol.Allow) == 0 {
		pol.Allow = []sandbox.EgressRule{{Host: "*.allowed.test"}}
	}
	f.proxy, f.addr = startProxy(tb, Options{Policy: pol, Hooks: Hooks{Resolver: f.world, Dial: f.world.Dial}}, l)
	return f
}

// startProxy serves a proxy on l until the test ends.
func startProxy(tb testing.TB, opts Options, l net.Listener) (*Proxy, string) {
	tb.Helper()
	p, err := New(opts)
	if err != nil {
		l.Close()
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
		p.Close()
	})
	return p, l.Addr().String()
}

// client is a Go HTTP client that uses the proxy with the given scheme
// ("http" or "socks5") and trusts the test CA.
func (f *fixture) client(scheme string) *http.Client {
	u := &url.URL{Scheme: scheme, Host: f.addr}
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: f.ca.pool()},
	}, Timeout: 20 * time.Second}
}

// get fetches a URL through the proxy and returns status and body.
func (f *fixture) get(tb testing.TB, c *http.Client, u string) (int, string, error) {
	tb.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// raw sends bytes to the proxy on a fresh connection and returns the
// connection and a reader of the answer.
func (f *fixture) raw(tb testing.TB, req string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		tb.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// refused sends one request and requires a refusal with the given status
// whose one-line reason mentions want.
func (f *fixture) refused(tb testing.TB, req string, status int, want string) {
	tb.Helper()
	_, br := f.raw(tb, req)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tb.Errorf("%q: reading the answer: %v", req, err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status || !strings.Contains(string(body), want) || strings.Count(string(body), "\n") != 1 {
		tb.Errorf("%q: got %d %q; want %d with a one-line reason mentioning %q", req, resp.StatusCode, body, status, want)
	}
}

// event waits for an event whose reason mentions want; events about caps
// are recorded when a connection ends, a little after the client sees it.
func (f *fixture) event(tb testing.TB, want string) sandbox.EgressEvent {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ev := range f.proxy.Events() {
			if strings.Contains(ev.Reason, want) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no event mentions %q; events: %+v", want, f.proxy.Events())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isRefusedTLS reports whether a TLS handshake failed because the peer
// closed or alerted, as the proxy does for a refused ClientHello.
func isRefusedTLS(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "unrecognized name") || errors.Is(err, io.EOF))
}
