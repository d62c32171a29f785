package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// recorder is an origin server that records the requests it gets.
type recorder struct {
	mu   sync.Mutex
	seen []*http.Request
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.seen = append(r.seen, req.Clone(req.Context()))
	r.mu.Unlock()
	if req.URL.Path == "/chunked" {
		w.(http.Flusher).Flush()
	}
	fmt.Fprintf(w, "%s %s %s", req.Method, req.URL.RequestURI(), body)
}

func (r *recorder) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.seen...)
}

// TestHTTPForward: absolute-URI requests on one kept-alive connection are
// each checked on their own; hop-by-hop headers do not reach the target.
func TestHTTPForward(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	e := newEnv(t, map[string]string{"intra.example.com": "10.9.9.9", "api.example.com": "203.0.113.7"}, nil)
	e.dial.route("203.0.113.7:80", host)
	l := e.listen(t, Policy{Mode: ModeList, Hosts: []string{host, "*.example.com"}})
	c := dialSocket(t, l)
	br := bufio.NewReader(c)
	send := func(raw string) (*http.Response, string) {
		t.Helper()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatalf("write request: %v", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response to %q: %v", firstLine(raw), err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		return resp, string(body)
	}
	resp, body := send("GET http://" + host + "/a?q=1 HTTP/1.1\r\nHost: " + host + "\r\nProxy-Authorization: Basic eDp5\r\n" +
		"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: secret\r\nX-End: kept\r\n\r\n")
	if resp.StatusCode != 200 || body != "GET /a?q=1 " {
		t.Errorf("GET /a = %s %q; want 200 %q", resp.Status, body, "GET /a?q=1 ")
	}
	resp, body = send("GET http://intra.example.com/b HTTP/1.1\r\nHost: intra.example.com\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `"10.9.9.9:80"`) || resp.Close {
		t.Errorf("GET intra = %s %q (close %v); want a 403 naming \"10.9.9.9:80\", connection kept", resp.Status, body, resp.Close)
	}
	resp, body = send("POST http://api.example.com/c HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 || body != "POST /c hello" {
		t.Errorf("POST /c = %s %q; want 200 %q", resp.Status, body, "POST /c hello")
	}
	resp, body = send("PUT http://" + host + "/d HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	if resp.StatusCode == http.StatusContinue {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response after 100: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	if body != "PUT /d abc" {
		t.Errorf("PUT /d chunked = %q; want %q", body, "PUT /d abc")
	}
	resp, body = send("GET http://" + host + "/chunked HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 || body != "GET /chunked " || !resp.Close {
		t.Errorf("GET /chunked = %s %q (close %v); want 200 and the connection closed", resp.Status, body, resp.Close)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after Connection: close: Read = %d, %v; want EOF", n, err)
	}

	reqs := rec.requests()
	if len(reqs) != 4 {
		t.Fatalf("target got %d requests; want 4", len(reqs))
	}
	first := reqs[0]
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Connection"} {
		if v := first.Header.Get(h); v != "" {
			t.Errorf("target got %s: %q; want it stripped", h, v)
		}
	}
	if first.Header.Get("X-End") != "kept" || first.RequestURI != "/a?q=1" || first.Header.Get("User-Agent") != "" {
		t.Errorf("target got %s %v; want origin-form /a?q=1, X-End kept, no User-Agent added", first.RequestURI, first.Header)
	}
	if got := e.dial.history(); len(got) != 4 || got[1] != "203.0.113.7:80" {
		t.Errorf("dialed %v; want 4 dials, the second to the checked address 203.0.113.7:80", got)
	}
}

// TestHTTPThroughClient drives the proxy with net/http's own client, as an
// agent's HTTP_PROXY would.
func TestHTTPThroughClient(t *testing.T) {
	srv := httptest.NewServer(&recorder{})
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	e := newEnv(t, nil, nil)
	l := e.listen(t, Policy{Mode: ModeList, Hosts: []string{host}})
	tr := &http.Transport{
		Proxy:       http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid"}),
		DialContext: unixDialer(l.Path()),
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for i := range 3 {
		resp, err := client.Get(fmt.Sprintf("%s/x%d", srv.URL, i))
		if err != nil {
			t.Fatalf("GET via the proxy: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("GET /x%d ", i); string(body) != want {
			t.Errorf("GET /x%d = %q; want %q", i, body, want)
		}
	}
	resp, err := client.Get("http://127.0.0.2:9/")
	if err != nil {
		t.Fatalf("GET a refused host: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET a refused host: status %s; want 403", resp.Status)
	}
	if s := e.p.Stats(); s.Allowed != 3 || s.Refused != 1 {
		t.Errorf("Stats() = %+v; want 3 allowed, 1 refused", s)
	}
}
