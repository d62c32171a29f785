package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLIFindsAnHTTPSDaemon: a daemon serving HTTPS with a self-signed
// certificate records its https:// address and its certificate in
// daemon.json, and the CLI, given only the data directory, reaches it,
// trusting that certificate.
func TestCLIFindsAnHTTPSDaemon(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	cert, key := selfSignedLoopback(t, t.TempDir())
	d := startDaemon(t, bin, home, "AGENTPOOL_TLS_CERT="+cert, "AGENTPOOL_TLS_KEY="+key)
	d.stopAtCleanup()
	b, err := os.ReadFile(filepath.Join(home, daemonFileName))
	if err != nil {
		t.Fatal(err)
	}
	var info daemonInfo
	if err := json.Unmarshal(b, &info); err != nil || !strings.HasPrefix(info.Addr, "https://127.0.0.1:") || info.Cert != cert {
		t.Fatalf("daemon.json = %s (%v); want an https:// address and the certificate %s", b, err, cert)
	}
	out, err := d.cli("providers", "list")
	if err != nil || !strings.Contains(out, "claude") {
		t.Fatalf("agentpool providers against the HTTPS daemon = %v\n%s", err, out)
	}
	if _, err := d.client.Health(context.Background()); err != nil {
		t.Errorf("Health over HTTPS: %v", err)
	}
}

// selfSignedLoopback writes a self-signed certificate for 127.0.0.1 and
// its key in dir, mode 0600, and returns their paths.
func selfSignedLoopback(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentpool test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
