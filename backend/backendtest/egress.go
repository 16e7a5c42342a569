//go:build linux

package backendtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// world is the fake Internet of the egress tests: names resolve to the
// addresses it says, and dials to its one public address reach real
// servers on the host's loopback. It counts every dial.
type world struct {
	names  map[string][]netip.Addr
	routes map[netip.AddrPort]string
	mu     sync.Mutex
	dials  []netip.AddrPort
}

// publicAddr is the address allowed.test resolves to; the proxy checks it
// as a public address, and the dial hook routes it to the test servers.
var publicAddr = netip.MustParseAddr("11.0.0.1")

func (w *world) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := w.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (w *world) Dial(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	w.mu.Lock()
	w.dials = append(w.dials, addr)
	w.mu.Unlock()
	to, ok := w.routes[addr]
	if !ok {
		return nil, fmt.Errorf("the test world has no route to %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", to)
}

func (w *world) dialed() []netip.AddrPort {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]netip.AddrPort(nil), w.dials...)
}

// testCA makes a CA and a server certificate for names, valid for an hour.
func testCA(t *testing.T, names ...string) (caPEM []byte, cert tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// testEgress runs the allowlist rows of the suite: real HTTPS and HTTP
// servers on the host, reached from inside through the egress proxy, and
// the egress attack probes.
func (s *suite) testEgress(t *testing.T) {
	s.skip(t, "egress allowlist")
	if !s.Backend.Features().Egress {
		testenv.Require(t, "egress", fmt.Errorf("backend %s cannot route egress (its Features say so; "+
			"a backend without egress lists \"egress allowlist\" in Config.Skip)", s.Backend.Name()))
	}
	caPEM, cert := testCA(t, "allowed.test")
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s\n", r.Host) })
	https := httptest.NewUnstartedServer(hello)
	https.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	https.StartTLS()
	defer https.Close()
	plain := httptest.NewServer(hello)
	defer plain.Close()
	w := &world{
		names: map[string][]netip.Addr{
			"allowed.test":  {publicAddr},
			"private.test":  {netip.MustParseAddr("10.1.2.3")},
			"loopback.test": {netip.MustParseAddr("127.0.0.1")},
			"metadata.test": {netip.MustParseAddr("169.254.169.254")},
			"mixed.test":    {publicAddr, netip.MustParseAddr("192.168.1.1")},
			"v6mapped.test": {netip.MustParseAddr("::ffff:127.0.0.1")},
			"denied.test":   {publicAddr},
		},
		routes: map[netip.AddrPort]string{
			netip.AddrPortFrom(publicAddr, 443): https.Listener.Addr().String(),
			netip.AddrPortFrom(publicAddr, 80):  plain.Listener.Addr().String(),
		},
	}
	rules := []sandbox.EgressRule{{Host: "allowed.test"}}
	for _, h := range []string{"private.test", "loopback.test", "metadata.test", "mixed.test", "v6mapped.test"} {
		rules = append(rules, sandbox.EgressRule{Host: h})
	}
	p := Policy(t, func(p *sandbox.Policy) { p.Network.Allow = rules })
	inst := s.create(t, p)
	ctx := context.Background()
	proxy, err := egress.Attach(ctx, inst, egress.Options{Policy: p.Network, Hooks: egress.Hooks{Resolver: w, Dial: w.Dial}})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	run := func(spec sandbox.ProcessSpec) sandbox.Result {
		mark := proxy.Cursor()
		res := Exec(t, inst, spec)
		res.Egress = proxy.Since(mark)
		return res
	}
	if err := putInput(ctx, inst, "ca.pem", strings.NewReader(string(caPEM))); err != nil {
		t.Fatal(err)
	}
	scripts, err := probeFS.ReadDir("probes/egress")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range scripts {
		b, _ := probeFS.ReadFile("probes/egress/" + e.Name())
		if err := putInput(ctx, inst, e.Name(), strings.NewReader(string(b))); err != nil {
			t.Fatal(err)
		}
	}
	_, httpsPort, _ := net.SplitHostPort(https.Listener.Addr().String())
	_, httpPort, _ := net.SplitHostPort(plain.Listener.Addr().String())
	env := map[string]string{
		"ATTACK_HTTPS_URL":   "https://allowed.test/hello",
		"ATTACK_HTTP_URL":    "http://allowed.test/hello",
		"ATTACK_CAFILE":      "/workspace/input/ca.pem",
		"ATTACK_DENIED_HOST": "denied.test",
		"ATTACK_HOST_PORTS":  httpsPort + "," + httpPort,
	}
	ran := 0
	var events []sandbox.EgressEvent
	for _, e := range scripts {
		if e.Name() == "attacklib.py" {
			continue
		}
		res := run(sandbox.ProcessSpec{Cmd: []string{"python3", "/workspace/input/" + e.Name()}, Env: env})
		events = append(events, res.Egress...)
		s.checkLines(t, strings.TrimSuffix(e.Name(), ".py"), res)
		ran++
	}
	// allowed names whose addresses are not public are refused after the lookup
	for _, h := range []string{"private.test", "loopback.test", "metadata.test", "mixed.test", "v6mapped.test"} {
		res := run(sandbox.ProcessSpec{Cmd: []string{"python3", "-c", fmt.Sprintf(
			"import urllib.request\ntry:\n urllib.request.urlopen('http://%s/', timeout=10); print('reached')\nexcept Exception as e: print('refused', e)", h)}})
		if !strings.HasPrefix(res.Stdout, "refused") {
			t.Errorf("ATTACK NOT STOPPED: %s (an allowed name with a non-public address): %q", h, res.Stdout)
		}
		if len(res.Egress) == 0 || res.Egress[0].Allowed || res.Egress[0].Host != h {
			t.Errorf("%s: egress events %+v, want one refusal", h, res.Egress)
		}
		events = append(events, res.Egress...)
	}
	for _, a := range w.dialed() {
		if a.Addr() != publicAddr {
			t.Errorf("the proxy dialled %s, which no allowed request needed", a)
		}
	}
	allowed, denied := 0, 0
	for _, ev := range events {
		if ev.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed == 0 || denied == 0 {
		t.Errorf("egress events: %d allowed, %d denied; want both", allowed, denied)
	}
	t.Logf("%d egress probes; %d allowed and %d denied decisions; %d dials, all to allowed.test", ran, allowed, denied, len(w.dialed()))
}
