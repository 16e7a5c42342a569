package e2b_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testenv"
)

// The E2B_DOMAIN test's domain and the loopback address its names lead
// to (port 443, as the SDKs dial it).
const (
	testDomain = "airlock.test"
	domainAddr = "127.0.0.77"
)

// serveDomain serves h over HTTPS on domainAddr:443 with a certificate
// for testDomain and its subdomains; it returns the control plane's URL
// and the certificate's PEM file.
func serveDomain(t testing.TB, h http.Handler) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: testDomain},
		DNSNames: []string{testDomain, "*." + testDomain}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "domain-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(domainAddr, "443"))
	testenv.Require(t, "port 443 of "+domainAddr+" (the SDKs dial https://PORT-ID.DOMAIN on 443)", err)
	hs := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}
	done := make(chan error, 1)
	go func() { done <- hs.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = hs.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving: %v", err)
		}
	})
	return "https://api." + testDomain, ca
}
