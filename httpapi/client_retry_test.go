package httpapi

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// resetFirst is a listener whose first n connections are reset on accept,
// as a daemon under a connection flood closes ones it cannot tell apart.
type resetFirst struct {
	net.Listener
	n atomic.Int32
}

func (l *resetFirst) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(-1) < 0 {
			return c, nil
		}
		_ = c.(*net.TCPConn).SetLinger(0) // close with a RST
		_ = c.Close()
	}
}

// A GET whose connection is reset is sent again and answered; a POST is
// not sent again (it may have been acted on).
func TestClientSendsAGetAgainAfterAReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &resetFirst{Listener: ln}
	var posts atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status": "ok"}`))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	tr := &http.Transport{DisableKeepAlives: true} // a new connection for each request
	t.Cleanup(tr.CloseIdleConnections)
	c := &Client{BaseURL: "http://" + ln.Addr().String(), Token: "t", HTTP: &http.Client{Transport: tr}}
	l.n.Store(2)
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatalf("GET after two resets: %v; want it sent again and answered", err)
	}
	l.n.Store(1)
	if err := c.call(context.Background(), http.MethodPost, "/v1/x", map[string]string{}, nil); err == nil {
		t.Error("POST after a reset succeeded; want the reset reported, not the POST sent again")
	}
	if n := posts.Load(); n != 0 {
		t.Errorf("%d POSTs reached the server; want 0", n)
	}
}
