package egress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// benchSize is the size of one download.
const benchSize = 100 << 20

// benchFixture is a fixture whose caps do not get in the way.
func benchFixture(b *testing.B) *fixture {
	return newFixture(b, sandbox.NetworkPolicy{MaxBytesIn: 1 << 50, MaxBytesOut: 1 << 50, MaxConnections: 1024, MaxConnDuration: sandbox.Duration(time.Hour)})
}

// directClient reaches the origin servers without the proxy: every dial
// goes to the loopback server for the URL's scheme.
func (f *fixture) directClient(keepAlive bool) *http.Client {
	servers := map[string]string{"443": f.https.Listener.Addr().String(), "80": f.http.Listener.Addr().String()}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, servers[port])
		},
		TLSClientConfig:   &tls.Config{RootCAs: f.ca.pool()},
		DisableKeepAlives: !keepAlive,
	}}
}

// proxyClient goes through the proxy.
func (f *fixture) proxyClient(keepAlive bool) *http.Client {
	c := f.client("http")
	c.Transport.(*http.Transport).DisableKeepAlives = !keepAlive
	return c
}

// fetch downloads a URL to the end and returns the body size.
func fetch(b *testing.B, c *http.Client, u string) int64 {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	return n
}

// BenchmarkDownload measures the throughput of a 100 MB download through
// the proxy and, as the baseline in the same run, without it.
func BenchmarkDownload(b *testing.B) {
	f := benchFixture(b)
	for _, scheme := range []string{"https", "http"} {
		u := scheme + "://api.allowed.test/bytes?n=104857600"
		for _, mode := range []struct {
			name   string
			client *http.Client
		}{{"direct", f.directClient(true)}, {"proxy", f.proxyClient(true)}} {
			b.Run(scheme+"-"+mode.name, func(b *testing.B) {
				b.SetBytes(benchSize)
				for b.Loop() {
					if n := fetch(b, mode.client, u); n != benchSize {
						b.Fatalf("got %d bytes", n)
					}
				}
			})
		}
	}
}

// BenchmarkSetup measures connection setup: a new connection, the TLS
// handshake for https, and a small request, through the proxy and without
// it. It reports the median as p50-ns/op besides the mean.
func BenchmarkSetup(b *testing.B) {
	f := benchFixture(b)
	for _, scheme := range []string{"https", "http"} {
		u := scheme + "://api.allowed.test/hello"
		for _, mode := range []struct {
			name   string
			client *http.Client
		}{{"direct", f.directClient(false)}, {"proxy", f.proxyClient(false)}} {
			b.Run(scheme+"-"+mode.name, func(b *testing.B) {
				var times []time.Duration
				for b.Loop() {
					start := time.Now()
					fetch(b, mode.client, u)
					times = append(times, time.Since(start))
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns/op")
			})
		}
	}
}
