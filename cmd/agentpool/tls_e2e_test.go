package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/internal/testcert"
)

// TestCLIFindsAnHTTPSDaemon: a daemon serving HTTPS with a self-signed
// certificate records its https:// address and its certificate in
// daemon.json, and the CLI, given only the data directory, reaches it,
// trusting that certificate.
func TestCLIFindsAnHTTPSDaemon(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	cert, key, _ := testcert.Loopback(t, t.TempDir())
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
