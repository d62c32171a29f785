package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
	"github.com/agentpool/agentpool/pool"
)

// attachWait bounds every wait of the attach tests.
const attachWait = 15 * time.Second

// newBash starts a real bash on a PTY backend and stops it at cleanup.
func newBash(t *testing.T, tweak func(*pty.Config)) *pty.Backend {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	cfg := pty.Config{
		Spec: backends.Spec{Provider: "shell", Kind: backends.KindPTY, Path: bash, Dir: t.TempDir(),
			Args: []string{"--norc", "--noprofile", "-i"},
			Env:  []string{"PS1=agentpool$ ", "HISTFILE=", "PROMPT_COMMAND="},
			PTY:  backends.PTYSpec{ReadyPattern: `^agentpool\$ $`}},
		StopGrace: 200 * time.Millisecond, KillGrace: 200 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	b, err := pty.New(cfg)
	if err != nil {
		t.Fatalf("pty.New() error = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), attachWait)
		defer cancel()
		if err := b.Stop(ctx); err != nil && !errors.Is(err, backends.ErrExited) {
			t.Errorf("Stop() error = %v", err)
		}
	})
	if _, err := b.Start(ctx, ""); err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	return b
}

// attachEnv serves a fake pool whose session "s" has agent "shell", a
// real bash, and agent "acp", a backend without a terminal.
func attachEnv(t *testing.T, b backends.Backend, tweak func(*Config)) *testEnv {
	fp := &fakePool{}
	fp.BackendFunc = func(_ context.Context, session, agent string) (backends.Backend, error) {
		switch {
		case session != "s":
			return nil, fmt.Errorf("session %q: %w", session, pool.ErrNotFound)
		case agent == "acp":
			return struct{ backends.Backend }{}, nil
		}
		return b, nil
	}
	return newTestEnv(t, fp, tweak)
}

// viewer is a test client of an attach stream that keeps what it read.
type viewer struct {
	t    *testing.T
	name string
	c    *AttachConn
	out  strings.Builder
}

func dialViewer(t *testing.T, e *testEnv, name string) *viewer {
	t.Helper()
	return dialViewerWith(t, e.client, name)
}

func dialViewerWith(t *testing.T, client *Client, name string) *viewer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	c, err := client.Attach(ctx, "s", "shell")
	if err != nil {
		t.Fatalf("Attach(s, shell) error = %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &viewer{t: t, name: name, c: c}
}

// next reads until match says stop, failing the test on an error or at
// the deadline. It returns the message that matched (zero for output).
func (v *viewer) next(what string, match func(out string, m AttachMessage) bool) AttachMessage {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	for {
		p, m, err := v.c.Next(ctx)
		if err != nil {
			v.t.Fatalf("%s: Next() error = %v waiting for %s; output so far %q", v.name, err, what, v.out.String())
		}
		v.out.Write(p)
		if match(v.out.String(), m) {
			return m
		}
	}
}

// waitOutput reads until the output holds want.
func (v *viewer) waitOutput(want string) {
	v.t.Helper()
	v.next(fmt.Sprintf("output %q", want), func(out string, _ AttachMessage) bool { return strings.Contains(out, want) })
}

// waitMsg reads until a control message arrives and returns it.
func (v *viewer) waitMsg() AttachMessage {
	v.t.Helper()
	return v.next("a control message", func(_ string, m AttachMessage) bool { return m.Type != "" })
}

func (v *viewer) send(f func(context.Context) error) {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	if err := f(ctx); err != nil {
		v.t.Fatalf("%s: send error = %v", v.name, err)
	}
}

func (v *viewer) typeText(s string) {
	v.t.Helper()
	v.send(func(ctx context.Context) error { return v.c.Input(ctx, []byte(s)) })
}

func (v *viewer) expectMsg(typ, code string) {
	v.t.Helper()
	if m := v.waitMsg(); m.Type != typ || m.Code != code {
		v.t.Fatalf("%s: message = %+v; want type %q code %q", v.name, m, typ, code)
	}
}

// Two people on one bash: keystrokes go in, output comes out to both,
// resize reaches the program, and only the holder of the input types.
func TestAttachShell(t *testing.T) {
	e := attachEnv(t, newBash(t, nil), nil)
	a := dialViewer(t, e, "a")
	b := dialViewer(t, e, "b")
	a.waitOutput("agentpool$") // the redraw shows the prompt
	b.waitOutput("agentpool$")

	a.typeText("echo early\r")
	a.expectMsg(AttachError, CodeNotWriter)
	a.send(a.c.Take)
	a.expectMsg(AttachTaken, "")
	a.typeText("echo hi-$((40+2))\r")
	a.waitOutput("hi-42")
	b.waitOutput("hi-42")
	if strings.Contains(a.out.String(), "early") {
		t.Errorf("keystrokes typed before take reached the terminal: %q", a.out.String())
	}

	a.send(func(ctx context.Context) error { return a.c.Resize(ctx, 100, 30) })
	a.typeText("stty size\r")
	a.waitOutput("30 100")

	b.send(func(ctx context.Context) error { return b.c.Resize(ctx, 20, 10) })
	b.expectMsg(AttachError, CodeNotWriter)
	b.typeText("echo from-b\r")
	b.expectMsg(AttachError, CodeNotWriter)
	b.send(b.c.Take)
	b.expectMsg(AttachError, CodeInputHeld)

	a.send(a.c.Release)
	a.expectMsg(AttachReleased, "")
	b.send(b.c.Take)
	b.expectMsg(AttachTaken, "")
	b.typeText("echo bee-$((1+1))\r")
	a.waitOutput("bee-2")
	b.waitOutput("bee-2")
	if strings.Contains(b.out.String(), "from-b") {
		t.Errorf("keystrokes of a non-writer reached the terminal: %q", b.out.String())
	}

	b.send(func(ctx context.Context) error { return b.c.Send(ctx, AttachMessage{Type: "dance"}) })
	b.expectMsg(AttachError, CodeBadRequest)
	b.send(func(ctx context.Context) error { return b.c.Resize(ctx, 0, 5) })
	b.expectMsg(AttachError, CodeBadRequest)
}

// Requests refused before the upgrade get API errors.
func TestAttachRefused(t *testing.T) {
	e := attachEnv(t, nil, nil)
	tests := []struct {
		name, path string
		auth       bool
		wantStatus int
		wantCode   string
	}{
		{"no token", "/v1/sessions/s/attach?agent=acp", false, http.StatusUnauthorized, CodeUnauthorized},
		{"wrong query token", "/v1/sessions/s/attach?agent=acp&token=nope", false, http.StatusUnauthorized, CodeUnauthorized},
		// The token never travels in a URL: the page uses tickets.
		{"query token", "/v1/sessions/s/attach?agent=acp&token=" + testToken, false, http.StatusUnauthorized, CodeUnauthorized},
		{"made-up ticket", "/v1/sessions/s/attach?agent=acp&ticket=nope", false, http.StatusUnauthorized, CodeUnauthorized},
		{"not a terminal", "/v1/sessions/s/attach?agent=acp", true, http.StatusConflict, CodeUnsupported},
		{"unknown session", "/v1/sessions/nope/attach", true, http.StatusNotFound, CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), attachWait)
			defer cancel()
			h := http.Header{}
			if tt.auth {
				h.Set("Authorization", "Bearer "+testToken)
			}
			c, resp, err := websocket.Dial(ctx, e.ts.URL+tt.path, &websocket.DialOptions{HTTPHeader: h})
			if err == nil {
				_ = c.CloseNow()
				t.Fatalf("Dial(%q) succeeded; want status %d", tt.path, tt.wantStatus)
			}
			if resp == nil || resp.StatusCode != tt.wantStatus {
				t.Fatalf("Dial(%q) response = %v (err %v); want status %d", tt.path, resp, err, tt.wantStatus)
			}
			var ae *Error
			if err := answerError(resp); !errors.As(err, &ae) || ae.Code != tt.wantCode {
				t.Errorf("Dial(%q) error body = %v; want code %q", tt.path, err, tt.wantCode)
			}
		})
	}
	// The Client reports the same errors.
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	var ae *Error
	if _, err := e.client.Attach(ctx, "s", "acp"); !errors.As(err, &ae) || ae.Code != CodeUnsupported {
		t.Errorf("Client.Attach(s, acp) error = %v; want code %q", err, CodeUnsupported)
	}
}

// The stream ends with a reason when the program exits and when the
// server shuts down.
func TestAttachEnds(t *testing.T) {
	t.Run("exited", func(t *testing.T) {
		e := attachEnv(t, newBash(t, nil), nil)
		a := dialViewer(t, e, "a")
		a.send(a.c.Take)
		a.expectMsg(AttachTaken, "")
		a.typeText("exit 3\r")
		assertEnd(t, a, AttachEndExited)
	})
	t.Run("shutdown", func(t *testing.T) {
		e := attachEnv(t, newBash(t, nil), nil)
		a := dialViewer(t, e, "a")
		a.waitOutput("agentpool$")
		done := make(chan struct{})
		go func() { defer close(done); e.srv.Shutdown() }()
		assertEnd(t, a, AttachEndShutdown)
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), attachWait)
		defer cancel()
		var ae *Error
		if _, err := e.client.Attach(ctx, "s", "shell"); !errors.As(err, &ae) || ae.Code != CodeShuttingDown {
			t.Errorf("Attach after Shutdown error = %v; want code %q", err, CodeShuttingDown)
		}
	})
}

// assertEnd reads v until the stream ends and checks the reason.
func assertEnd(t *testing.T, v *viewer, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	for {
		_, _, err := v.c.Next(ctx)
		if err == nil {
			continue
		}
		var end *AttachEnd
		if !errors.As(err, &end) || end.Reason != reason {
			t.Fatalf("Next() error = %v; want an AttachEnd with reason %q", err, reason)
		}
		return
	}
}

// A viewer that reads nothing is cut off and never holds up the program
// or the other viewers. The program's output comes in short bursts, each
// a fraction of what the viewer buffer holds, so that the viewer that
// reads keeps up even when the test process waits for a CPU for a
// moment, while the one that reads nothing falls behind by far more.
func TestAttachSlowViewer(t *testing.T) {
	b := newBash(t, func(c *pty.Config) { c.ViewerBuffer = 16 })
	e := attachEnv(t, b, func(c *Config) { c.WriteTimeout = 300 * time.Millisecond })
	// The server's socket buffers little (fixed buffers turn off
	// autotuning), and so does the slow viewer's, so that its unread
	// stream backs up into the server at once.
	ts := httptest.NewUnstartedServer(e.srv)
	ts.Listener = smallBufListener{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	tiny := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(smallSocketBuffer)
		}
		return c, err
	}}}
	t.Cleanup(tiny.CloseIdleConnections)
	slow := dialViewerWith(t, &Client{BaseURL: ts.URL, Token: testToken, HTTP: tiny}, "slow")
	fast := dialViewer(t, e, "fast")
	fast.send(fast.c.Take)
	fast.expectMsg(AttachTaken, "")
	fast.typeText("for i in $(seq 1 100); do seq 1 600; sleep 0.01; done; echo flood-$((1+1))-done\r")
	fast.waitOutput("flood-2-done")

	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	n := 0
	for {
		p, _, err := slow.c.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("slow viewer still attached after %d bytes", n)
			}
			break
		}
		n += len(p)
	}
	if n >= len(fast.out.String()) {
		t.Errorf("slow viewer read %d bytes, the whole stream (%d); want it cut off", n, len(fast.out.String()))
	}
}

// smallSocketBuffer is the socket buffer size of the slow viewer test.
const smallSocketBuffer = 4 << 10

// smallBufListener gives accepted connections a small send buffer.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(smallSocketBuffer)
	}
	return c, err
}
