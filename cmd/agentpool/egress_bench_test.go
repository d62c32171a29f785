package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
	"github.com/agentpool/agentpool/internal/wiring"
)

// Environment of the TLS client helper (TestHelperTLSClient).
const (
	envTLSClient = "AGENTPOOL_HELPER_TLS_CLIENT" // "1" runs it
	envTLSTarget = "AGENTPOOL_TLS_TARGET"        // host:port of the server
	envTLSVia    = "AGENTPOOL_TLS_VIA"           // host:port of an HTTP proxy; "" connects directly
	envTLSCA     = "AGENTPOOL_TLS_CA"            // the server's certificate, PEM
	envTLSCount  = "AGENTPOOL_TLS_COUNT"         // how many connections
)

// TestHelperTLSClient is not a test: run with AGENTPOOL_HELPER_TLS_CLIENT=1
// it makes AGENTPOOL_TLS_COUNT new HTTPS connections to the target, each
// a TCP connection (through the proxy's CONNECT when one is named), a TLS
// handshake and one GET, and prints each one's duration in nanoseconds.
func TestHelperTLSClient(t *testing.T) {
	if os.Getenv(envTLSClient) != "1" {
		t.Skip("helper")
	}
	n, _ := strconv.Atoi(os.Getenv(envTLSCount))
	for _, d := range tlsRounds(os.Getenv(envTLSTarget), os.Getenv(envTLSVia), []byte(os.Getenv(envTLSCA)), n) {
		fmt.Println(d.Nanoseconds())
	}
	os.Exit(0)
}

// tlsRounds makes n new HTTPS connections to target and times each.
func tlsRounds(target, proxy string, caPEM []byte, n int) []time.Duration {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	host, _, _ := net.SplitHostPort(target)
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		addr := target
		if proxy != "" {
			addr = proxy
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(1)
		}
		br := bufio.NewReader(c)
		if proxy != "" {
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != http.StatusOK {
				fmt.Fprintln(os.Stderr, "CONNECT:", err, resp)
				os.Exit(1)
			}
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{RootCAs: pool, ServerName: host})
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
		if _, err := io.Copy(io.Discard, tc); err != nil {
			fmt.Fprintln(os.Stderr, "GET:", err)
			os.Exit(1)
		}
		tc.Close()
		out = append(out, time.Since(t0))
	}
	return out
}

// bufConn reads through the reader that read the proxy's answer.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// BenchmarkProxiedConnectionConfined times a new HTTPS connection to a
// server on loopback (TCP, TLS handshake, one GET) made directly by this
// process, and made by a confined agent — the test binary run by the
// built binary's launcher in namespaces of its own — through its only way
// out: the launcher's relay on its loopback, the launch's socket and the
// daemon's egress proxy, which checks the address against the provider's
// list. It reports each one's median and what the way out adds.
func BenchmarkProxiedConnectionConfined(b *testing.B) {
	bin := agentpoolBinary(b)
	dir := b.TempDir()
	_, ns := benchManagers(b, bin, dir)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	target := strings.TrimPrefix(srv.URL, "https://")
	p, err := egress.New(egress.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	e := &wiring.Egress{Proxy: p, Dir: b.TempDir()}
	sb := backends.SandboxSpec{Enabled: true, Network: backends.NetworkList, Hosts: []string{target}, Read: []string{filepath.Dir(os.Args[0])}}
	ln, err := p.Listen(filepath.Join(e.Dir, "bench.sock"), wiring.EgressPolicy(sb), egress.Meta{Session: "bench", Provider: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: sb, Worktree: dir, Exe: os.Args[0], PATH: os.Getenv("PATH")})
	n := max(b.N, 20)
	b.ResetTimer()
	direct := tlsRounds(target, "", caPEM, n)
	j, err := ns.NewJail(sandbox.JailConfig{Path: []string{"bench", "tls"}, Policy: &pol, Session: "bench", TmpRoot: dir + ".tmp",
		Egress: &sandbox.EgressView{Socket: ln.Path()}})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Release()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTLSClient$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envTLSClient+"=1", envTLSTarget+"="+target, envTLSVia+"=127.0.0.1:"+strconv.Itoa(sandbox.EgressProxyPort),
		envTLSCA+"="+string(caPEM), envTLSCount+"="+strconv.Itoa(n), "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.Prepare(cmd); err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("confined client: %v\n%s%s", err, out, stderr.String())
	}
	var proxied []time.Duration
	for _, f := range strings.Fields(string(out)) {
		if ns, err := strconv.ParseInt(f, 10, 64); err == nil {
			proxied = append(proxied, time.Duration(ns))
		}
	}
	b.StopTimer()
	if len(proxied) != n {
		b.Fatalf("confined client made %d connections; want %d\n%s", len(proxied), n, out)
	}
	med := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	md, mp := med(direct), med(proxied)
	b.ReportMetric(float64(md.Microseconds())/1000, "ms-median-direct")
	b.ReportMetric(float64(mp.Microseconds())/1000, "ms-median-confined-proxied")
	b.ReportMetric(float64((mp-md).Microseconds())/1000, "ms-added-by-egress")
}
