package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// answer reads one answer from br within limit, skipping nothing: a
// "100 Continue" is returned like any other status. It returns status 0
// if the server closed the connection without answering.
func answer(t *testing.T, c interface{ SetReadDeadline(time.Time) error }, br *bufio.Reader, limit time.Duration) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if strings.Contains(err.Error(), "timeout") {
			t.Fatalf("no answer within %v: %v", limit, err)
		}
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestTrickledBodyIsCutOff(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newGuardEnv(t, fp, ConnLimits{BodyTimeout: 500 * time.Millisecond}, nil)
	c := e.dial(t)
	head := "POST /v1/sessions/s1/prompt HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a byte every 100 ms: the whole body would take 100 s
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()
	begin := time.Now()
	status, body := answer(t, c, bufio.NewReader(c), 20*time.Second)
	t.Logf("trickled body answered %d after %v", status, time.Since(begin).Round(time.Millisecond))
	if status != http.StatusRequestTimeout && status != 0 {
		t.Fatalf("trickled body answered %d %s; want 408 or the connection closed", status, body)
	}
	if status == http.StatusRequestTimeout && !strings.Contains(body, CodeRequestTimeout) {
		t.Errorf("408 body = %s; want code %s", body, CodeRequestTimeout)
	}
	if !isClosed(c) {
		t.Error("the connection of a timed-out body is open; want it closed")
	}
}

func TestUnauthenticatedBodyIsNotAwaited(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newGuardEnv(t, fp, ConnLimits{}, nil)
	for _, c := range []struct {
		name, headers string
	}{
		{"small body never sent", "Content-Length: 1000\r\n"},
		{"large body never sent", "Content-Length: 100000000\r\n"},
		{"100-continue", "Content-Length: 1000\r\nExpect: 100-continue\r\n"},
		{"chunked, no chunk sent", "Transfer-Encoding: chunked\r\n"},
		{"unknown route", "Content-Length: 1000\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := e.dial(t)
			path := "/v1/sessions/s1/prompt"
			if c.name == "unknown route" {
				path = "/v1/nowhere"
			}
			if _, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+c.headers+"\r\n"); err != nil {
				t.Fatal(err)
			}
			// The body never comes: the answer must not wait for it.
			status, body := answer(t, conn, bufio.NewReader(conn), 5*time.Second)
			if status != http.StatusUnauthorized {
				t.Fatalf("POST without a token, body unsent = %d %s; want 401 at once", status, body)
			}
			if !isClosed(conn) {
				t.Error("connection open after a refused request whose body was not read; want it closed")
			}
		})
	}
}

func TestBodyDeadlineIsLiftedForTheHandler(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	fp.WaitTurnFunc = func(ctx context.Context, id string, n int64) (pool.Turn, error) {
		select { // a turn that outlasts the body timeout
		case <-time.After(time.Second):
			return pool.Turn{ID: n, Session: id}, nil
		case <-ctx.Done():
			return pool.Turn{}, ctx.Err()
		}
	}
	e := newGuardEnv(t, fp, ConnLimits{BodyTimeout: 200 * time.Millisecond}, nil)
	c := e.dial(t)
	br := bufio.NewReader(c)
	for i := range 2 { // twice on one connection: it stays usable
		body := `{"text":"hi"}`
		req := fmt.Sprintf("POST /v1/sessions/s1/prompt?wait=true HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testToken, len(body), body)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		if status, b := answer(t, c, br, 20*time.Second); status != http.StatusOK {
			t.Fatalf("prompt %d with wait=true = %d %s; want 200 after the turn", i, status, b)
		}
	}
}
