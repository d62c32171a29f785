package httpapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/internal/testcert"
	"github.com/agentpool/agentpool/registry"
)

func TestListenCheckTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, _ := testcert.Loopback(t, dir)
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr, token, cert, key string
		want                   error // nil: accepted; errAny: refused
	}{
		{"127.0.0.1:7420", "", "", "", nil},
		{"localhost:7420", "", "", "", nil},
		{"[::1]:7420", "", cert, key, nil},
		{"0.0.0.0:7420", "tok", cert, key, nil},
		{"192.0.2.1:7420", "tok", cert, key, nil},
		{"0.0.0.0:7420", "", "", "", ErrInsecureListen},
		{":7420", "", cert, key, ErrInsecureListen},
		{"0.0.0.0:7420", "tok", "", "", ErrNoTLS},
		{"example.com:7420", "tok", "", "", ErrNoTLS},
		{"0.0.0.0:7420", "tok", cert, "", errAny},
		{"127.0.0.1:7420", "", junk, key, errAny},
		{"no-port", "tok", cert, key, errAny},
	} {
		err := ListenCheckTLS(c.addr, c.token, c.cert, c.key)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("ListenCheckTLS(%q, %q, %q, %q) error = %v; want nil", c.addr, c.token, c.cert, c.key, err)
		case c.want == errAny && err == nil, c.want != nil && c.want != errAny && !errors.Is(err, c.want):
			t.Errorf("ListenCheckTLS(%q, %q, %q, %q) error = %v; want %v", c.addr, c.token, c.cert, c.key, err, c.want)
		}
	}
}

// errAny stands for any error in a table.
var errAny = errors.New("any error")

func TestCheckAdvertiseURL(t *testing.T) {
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"https://host-a.example:7420", true},
		{"https://10.0.0.5:7420/", true},
		{"http://127.0.0.1:7420", true},
		{"http://localhost:7420", true},
		{"http://[::1]:7420", true},
		{"http://host-a.example:7420", false},
		{"http://10.0.0.5:7420", false},
		{"https://user:pw@host-a.example", false},
		{"https://host-a.example/?x=1", false},
		{"https://host-a.example/?", false},
		{"https://host-a.example/#f", false},
		{"ftp://host-a.example", false},
		{"https://", false},
		{"host-a.example:7420", false},
	} {
		_, err := CheckAdvertiseURL(c.url)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrAdvertise) {
			t.Errorf("CheckAdvertiseURL(%q) error = %v; want ok %v", c.url, err, c.ok)
		}
	}
}

// tlsHost serves a Server over TLS (ServeTLS) on 127.0.0.1 and returns its
// https URL.
func tlsHost(t testing.TB, cfg Config, cert, key string) string {
	t.Helper()
	reg, err := registry.New(registry.Config{Path: filepath.Join(t.TempDir(), "providers.json"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Registry = reg
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(log.New(io.Discard, "", 0)) // the refused handshake of the untrusting host
	done := make(chan error, 1)
	go func() { done <- ServeTLS(hs, ln, cert, key) }()
	t.Cleanup(func() {
		srv.Shutdown()
		_ = hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS() = %v; want ErrServerClosed", err)
		}
		_ = reg.Close()
	})
	return "https://" + ln.Addr().String()
}

// A host served over TLS answers clients that trust its certificate, and
// another host forwards to it with ClusterTLS; without, it cannot.
func TestForwardOverTLS(t *testing.T) {
	cert, key, roots := testcert.Loopback(t, t.TempDir())
	fpB := &fakePool{}
	prompts := promptRecorder(fpB)
	m := &clusterMap{key: clusterKey, hosts: map[string]ClusterHost{}, alive: map[string]bool{"a": true, "b": true},
		tokens: map[string]string{"a": "token-of-a-0123456789", "b": "token-of-b-0123456789"},
		owners: map[string]string{"s": "b"}, asked: map[string]int{}}
	urlB := tlsHost(t, Config{Pool: fpB, Token: m.tokens["b"], Cluster: testCluster{m: m, self: "b"}}, cert, key)
	m.hosts["b"] = ClusterHost{ID: "b", Advertise: urlB}

	direct := &Client{BaseURL: urlB, HTTP: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}}
	defer direct.HTTP.CloseIdleConnections()
	if h, err := direct.Health(fwdContext(t)); err != nil || h.Status == "" {
		t.Fatalf("Health() over TLS = %+v, %v; want an answer", h, err)
	}

	for _, c := range []struct {
		name  string
		roots *x509.CertPool
		ok    bool
	}{{"trusted", roots, true}, {"system roots", nil, false}} {
		t.Run(c.name, func(t *testing.T) {
			var conf *tls.Config
			if c.roots != nil {
				conf = &tls.Config{RootCAs: c.roots}
			}
			a := newTestEnv(t, refusingPool(t, "a"), func(cfg *Config) {
				cfg.Cluster, cfg.ClusterTLS, cfg.Token = testCluster{m: m, self: "a"}, conf, m.tokens["a"]
			})
			_, err := a.client.Prompt(fwdContext(t), "s", "", "over tls", false)
			switch {
			case c.ok && err != nil:
				t.Errorf("Prompt through a to b over TLS error = %v", err)
			case !c.ok && (!IsCode(err, CodeHostUnreachable) || !strings.Contains(err.Error(), "certificate")):
				t.Errorf("Prompt through a to b, whose certificate a does not trust, error = %v; want %s about the certificate", err, CodeHostUnreachable)
			}
		})
	}
	if got := prompts(); len(got) != 1 || got[0].Text != "over tls" {
		t.Errorf("host b got prompts %+v; want the one sent with its certificate trusted", got)
	}
}
