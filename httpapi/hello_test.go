package httpapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// TokenHashes lets the test cluster prove the tokens of its live hosts.
func (c testCluster) TokenHashes(context.Context) [][]byte {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	var out [][]byte
	for id, t := range c.m.tokens {
		if c.m.alive[id] {
			sum := sha256.Sum256([]byte(t))
			out = append(out, sum[:])
		}
	}
	return out
}

// portRecorder is an impostor on a port: it records every byte a client sends
// it and answers each request with canned, plausible answers.
type portRecorder struct {
	ln   net.Listener
	mu   sync.Mutex
	got  []byte
	wg   sync.WaitGroup
	done chan struct{}
}

// newPortRecorder listens on addr ("127.0.0.1:0" for any port).
func newPortRecorder(t *testing.T, addr string) *portRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &portRecorder{ln: ln, done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						r.mu.Lock()
						r.got = append(r.got, buf[:n]...)
						r.mu.Unlock()
						// Whatever was asked: a proof that proves nothing,
						// and a 200 for anything else.
						body := `{"proof":"` + strings.Repeat("ab", 32) + `"}`
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
							strconv.Itoa(len(body))+"\r\n\r\n"+body)
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

// received is everything clients sent the portRecorder.
func (r *portRecorder) received() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.got)
}

// TestClientSendsNoTokenToImpostor: a client pointed at a port another
// program holds gets ErrUnproven, and the program receives neither the
// token nor anything derived from it but the token's public id.
func TestClientSendsNoTokenToImpostor(t *testing.T) {
	imp := newPortRecorder(t, "127.0.0.1:0")
	const token = "the-daemons-token-0123456789abcdef"
	c := &Client{BaseURL: "http://" + imp.ln.Addr().String(), Token: token}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Sessions(ctx)
	if !errors.Is(err, ErrUnproven) {
		t.Fatalf("Sessions() via an impostor error = %v; want ErrUnproven", err)
	}
	_, err = c.CreateSession(ctx, pool.CreateRequest{Repo: "/r", Agent: "demo"})
	if !errors.Is(err, ErrUnproven) {
		t.Fatalf("CreateSession() via an impostor error = %v; want ErrUnproven", err)
	}
	got := imp.received()
	if strings.Contains(got, token) || strings.Contains(got, "Authorization") || strings.Contains(got, "/v1/sessions") {
		t.Errorf("the impostor received %q; want only hellos", got)
	}
	if !strings.Contains(got, "GET /v1/hello?") {
		t.Errorf("the impostor received %q; want a hello", got)
	}
}

// TestClientProvesDaemon: against the real server the hello passes, the
// connection is reused for the calls, and a daemon with another token is
// refused before the token is sent, as unauthorized.
func TestClientProvesDaemon(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	ctx := context.Background()
	c := &Client{BaseURL: e.ts.URL, Token: e.token}
	for i := 0; i < 3; i++ {
		if _, err := c.Sessions(ctx); err != nil {
			t.Fatalf("Sessions() #%d = %v", i, err)
		}
	}
	_, err := (&Client{BaseURL: e.ts.URL, Token: "another-token"}).Sessions(ctx)
	if !errors.Is(err, ErrUnproven) || !IsCode(err, CodeUnauthorized) {
		t.Errorf("Sessions() with another token error = %v; want ErrUnproven and unauthorized", err)
	}
}

// TestDaemonHelloProof: the proof is the HMAC of the nonce under the token's
// hash; bad input is a 400 naming the field; an unknown id a 401.
func TestDaemonHelloProof(t *testing.T) {
	e := newTestEnv(t, &fakePool{}, nil)
	sum := sha256.Sum256([]byte(e.token))
	id := credentialID(sum[:])
	nonce := strings.Repeat("0f", helloNonceBytes)
	get := func(q string) (int, string) {
		resp, err := http.Get(e.ts.URL + helloPath + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("nonce=" + nonce + "&cred=" + id); code != 200 || !strings.Contains(body, helloProof(sum[:], nonce, id)) {
		t.Errorf("hello = %d %s; want 200 with the proof", code, body)
	}
	if code, body := get("nonce=12&cred=" + id); code != 400 || !strings.Contains(body, `"field":"nonce"`) {
		t.Errorf("hello with a short nonce = %d %s; want 400 naming nonce", code, body)
	}
	other := sha256.Sum256([]byte("other"))
	if code, _ := get("nonce=" + nonce + "&cred=" + credentialID(other[:])); code != 401 {
		t.Errorf("hello for an unknown credential = %d; want 401", code)
	}
}
