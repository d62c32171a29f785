package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
)

// fakeTerminal is a WebSocket server playing the daemon's attach end: it
// answers take, echoes keystrokes as output ("got:..."), reports resizes
// as output ("size:CxR"), and on the keystrokes "bye" closes the stream
// with the reason given.
type fakeTerminal struct {
	reason string
	status websocket.StatusCode

	mu  sync.Mutex
	log []string // what the client sent, in order
	ws  sync.WaitGroup
}

func (f *fakeTerminal) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, s)
}

func (f *fakeTerminal) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

func (f *fakeTerminal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == httpapi.HelloPath {
		httpapi.ServeHello(w, r, cliTestToken)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+cliTestToken {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.ws.Add(1)
	defer f.ws.Done()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := context.Background()
	_ = c.Write(ctx, websocket.MessageBinary, []byte("screen$ "))
	for {
		typ, p, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			var m httpapi.AttachMessage
			_ = json.Unmarshal(p, &m)
			f.record(m.Type)
			switch m.Type {
			case httpapi.AttachTake:
				b, _ := json.Marshal(httpapi.AttachMessage{Type: httpapi.AttachTaken})
				_ = c.Write(ctx, websocket.MessageText, b)
			case httpapi.AttachResize:
				_ = c.Write(ctx, websocket.MessageBinary, fmt.Appendf(nil, "size:%dx%d;", m.Cols, m.Rows))
			}
			continue
		}
		f.record("keys:" + string(p))
		if string(p) == "bye" {
			_ = c.Close(f.status, f.reason)
			return
		}
		_ = c.Write(ctx, websocket.MessageBinary, append([]byte("got:"), p...))
	}
}

// attachRig runs an attachLoop against a fakeTerminal with a pipe for stdin.
type attachRig struct {
	term  *fakeTerminal
	stdin *os.File // the test writes keystrokes here
	out   *syncBuffer
	errw  *syncBuffer
	winch chan os.Signal
	done  chan error
}

func newAttachRig(t *testing.T, reason string, status websocket.StatusCode) *attachRig {
	t.Helper()
	ft := &fakeTerminal{reason: reason, status: status}
	ts := httptest.NewServer(ft)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rig := &attachRig{term: ft, stdin: w, out: &syncBuffer{}, errw: &syncBuffer{}, winch: make(chan os.Signal, 1), done: make(chan error, 1)}
	api := &httpapi.Client{BaseURL: ts.URL, Token: cliTestToken}
	conn, err := api.Attach(t.Context(), "s1", "")
	if err != nil {
		t.Fatalf("Attach() error = %v", err)
	}
	t.Cleanup(func() {
		_ = w.Close()
		_ = r.Close()
		ts.Close()
		ft.ws.Wait()
	})
	l := &attachLoop{conn: conn, in: r, out: rig.out, errw: rig.errw, winch: rig.winch,
		size: func() (int, int, bool) { return 132, 43, true }}
	go func() {
		err := l.run(context.Background())
		_ = conn.Close()
		rig.done <- err
	}()
	return rig
}

func (r *attachRig) waitOut(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output = %q; want it to contain %q", r.out.String(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *attachRig) typeKeys(t *testing.T, s string) {
	t.Helper()
	if _, err := r.stdin.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func (r *attachRig) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the attach loop did not end")
		return nil
	}
}

// The loop takes the input, sends the size, forwards keystrokes and
// resizes, prints the output, and stops at Ctrl-] without sending it or
// what follows it.
func TestAttachLoopDetach(t *testing.T) {
	rig := newAttachRig(t, "", websocket.StatusNormalClosure)
	rig.waitOut(t, "screen$ size:132x43;")
	rig.typeKeys(t, "ls\r")
	rig.waitOut(t, "got:ls\r")
	rig.winch <- syscall.SIGWINCH
	rig.waitOut(t, "size:132x43;got:ls\rsize:132x43;")
	rig.typeKeys(t, "x\x1dy")
	if err := rig.wait(t); err != nil {
		t.Errorf("run() after Ctrl-] = %v; want nil", err)
	}
	want := []string{"take", "resize", "keys:ls\r", "resize", "keys:x"}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(rig.term.sent(), want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := rig.term.sent(); !slices.Equal(got, want) {
		t.Errorf("server received %q; want %q", got, want)
	}
}

// The end of the stream ends the loop: success when the agent exited, an
// error saying why otherwise.
func TestAttachLoopEnds(t *testing.T) {
	tests := []struct {
		reason  string
		status  websocket.StatusCode
		wantErr bool
		wantMsg string
	}{
		{httpapi.AttachEndExited, websocket.StatusNormalClosure, false, "[the agent exited]"},
		{httpapi.AttachEndShutdown, websocket.StatusGoingAway, true, "[the daemon is shutting down]"},
		{httpapi.AttachEndDropped, websocket.StatusTryAgainLater, true, "fell behind"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			rig := newAttachRig(t, tt.reason, tt.status)
			rig.waitOut(t, "screen$ ")
			rig.typeKeys(t, "bye")
			err := rig.wait(t)
			var end *httpapi.AttachEnd
			if tt.wantErr != (err != nil) || (err != nil && (!errors.As(err, &end) || end.Reason != tt.reason)) {
				t.Errorf("run() = %v; want error %v with reason %q", err, tt.wantErr, tt.reason)
			}
			if !strings.Contains(rig.errw.String(), tt.wantMsg) {
				t.Errorf("stderr = %q; want %q", rig.errw.String(), tt.wantMsg)
			}
		})
	}
}

// attach checks its arguments and reports the daemon's refusal.
func TestAttachCommand(t *testing.T) {
	e := newCLIEnv(t)
	e.fp.BackendFunc = func(context.Context, string, string) (backends.Backend, error) {
		return struct{ backends.Backend }{}, nil
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attach"}, "wrong number of arguments"},
		{[]string{"attach", "a", "b"}, "wrong number of arguments"},
		{[]string{"attach", "s1", "--agent"}, "flag needs an argument"},
		{[]string{"attach", "s1", "--agent", "demo"}, httpapi.CodeUnsupported},
	} {
		_, errOut, err := e.run(t, t.Context(), false, false, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q error = %v (stderr %q); want %q", tc.args, err, errOut, tc.want)
		}
	}
	out, _, err := e.run(t, t.Context(), false, false, "", "attach", "--help")
	if err != nil || !strings.HasPrefix(out, "Usage: agentpool attach") || !strings.Contains(out, "Ctrl-]") {
		t.Errorf("attach --help = %q, %v; want the usage naming the detach key", out, err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and polling readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
