package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// endTime matches the time of a stream.end event.
var endTime = regexp.MustCompile(`"time":"[^"]*","type":"stream.end"`)

// fwdWait bounds the waits of the forwarding tests.
const fwdWait = 15 * time.Second

func fwdContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), fwdWait)
	t.Cleanup(cancel)
	return ctx
}

// promptRecorder makes fp's StartPrompt record its requests.
func promptRecorder(fp *fakePool) func() []pool.PromptRequest {
	var mu sync.Mutex
	var got []pool.PromptRequest
	fp.StartPromptFunc = func(_ context.Context, r pool.PromptRequest) (pool.Turn, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		return pool.Turn{ID: int64(len(got)), Session: r.Session, Agent: "demo", Prompt: r.Text}, nil
	}
	return func() []pool.PromptRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// A prompt sent to a host that does not own the session runs on the owner.
func TestForwardPromptToOwner(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	prompts := promptRecorder(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.owners["s"] = "b"

	turn, err := ce.a.client.Prompt(fwdContext(t), "s", "demo", "hello through a", false)
	if err != nil {
		t.Fatalf("Prompt(s) through host a error = %v", err)
	}
	got := prompts()
	if len(got) != 1 || got[0].Session != "s" || got[0].Text != "hello through a" || turn.ID != 1 || turn.Prompt != "hello through a" {
		t.Errorf("Prompt through a = %+v, owner's pool got %+v; want turn 1 of the one prompt, run on host b", turn, got)
	}
	if st, body := rawCall(t, http.MethodGet, ce.a.ts.URL+"/v1/sessions/s", "", map[string]string{"Authorization": "Bearer " + ce.a.token}); st != http.StatusOK || !strings.Contains(body, `"id":"s"`) {
		t.Errorf("GET /v1/sessions/s through a = %d %s; want 200 with host b's session", st, body)
	}
}

// An event stream through a host that does not own the session is the
// owner's stream byte for byte, resumes where asked (Last-Event-ID,
// ?after=), and delivers live events exactly once.
func TestForwardEventsAreTheOwnersStream(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	log := newLog(t, 1024)
	streamWorld(fpB, log)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.owners["s1"] = "b"
	log.Publish("s1", backends.EventTurnStarted, 1, map[string]any{"turn": 1})
	for i := range 5 {
		log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "agent", Text: "stored " + strings.Repeat("é", i)})
	}

	for _, c := range []struct {
		name  string
		query string
		head  map[string]string
	}{
		{"all", "", nil},
		{"last-event-id", "", map[string]string{"Last-Event-ID": "2"}},
		{"after", "&after=4", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			get := func(e *testEnv) string {
				h := map[string]string{"Authorization": "Bearer " + e.token}
				for k, v := range c.head {
					h[k] = v
				}
				st, body := rawCall(t, http.MethodGet, e.ts.URL+"/v1/sessions/s1/events?follow=false"+c.query, "", h)
				if st != http.StatusOK {
					t.Fatalf("events from %s = %d %s; want 200", e.ts.URL, st, body)
				}
				return body
			}
			// Each stream's stream.end is stamped when it is written.
			direct, through := endTime.ReplaceAllString(get(ce.b), ""), endTime.ReplaceAllString(get(ce.a), "")
			if direct != through || !strings.Contains(direct, "id: 6\n") {
				t.Errorf("stream through host a =\n%s\nwant host b's, byte for byte:\n%s", through, direct)
			}
		})
	}

	// Live: from seq 2 on, through a, while the owner publishes.
	const total = 80
	var got []int64
	done := make(chan error, 1)
	go func() {
		done <- ce.a.client.Events(fwdContext(t), "s1", 2, func(ev backends.Event) error {
			got = append(got, ev.Seq)
			if ev.Type == backends.EventTurnEnded {
				return ErrStop
			}
			return nil
		})
	}()
	for log.Len() < total-1 {
		log.Publish("s1", backends.EventMessageChunk, 1, backends.ChunkData{Role: "agent", Text: "live "})
	}
	log.Publish("s1", backends.EventTurnEnded, 1, map[string]any{"stop_reason": "end_turn"})
	if err := <-done; err != nil {
		t.Fatalf("Events(s1) through host a error = %v", err)
	}
	var want []int64
	for i := int64(3); i <= total; i++ {
		want = append(want, i)
	}
	if !slices.Equal(got, want) {
		t.Errorf("seqs through host a = %v; want 3..%d, each exactly once", got, total)
	}
}

// A terminal is attached to through a host that does not own the
// session, with the token and with an attach ticket of that host.
func TestForwardAttach(t *testing.T) {
	bash := newBash(t, nil)
	fpB := &fakePool{BackendFunc: func(_ context.Context, session, agent string) (backends.Backend, error) {
		if session != "s" {
			return nil, pool.ErrNotFound
		}
		return bash, nil
	}}
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.owners["s"] = "b"

	v := dialViewerWith(t, ce.a.client, "through-a")
	v.waitOutput("agentpool$")
	v.send(v.c.Take)
	v.expectMsg(AttachTaken, "")
	v.typeText("echo fwd-$((40+2))\r")
	v.waitOutput("fwd-42")

	// A page: a ticket of host a, and the upgrade without a header.
	var tk AttachTicket
	if err := ce.a.client.Call(fwdContext(t), http.MethodPost, "/v1/sessions/s/attach-ticket", nil, &tk); err != nil {
		t.Fatalf("attach-ticket on host a error = %v", err)
	}
	ctx := fwdContext(t)
	conn, resp, err := websocket.Dial(ctx, strings.Replace(ce.a.ts.URL, "http", "ws", 1)+"/v1/sessions/s/attach?agent=shell&ticket="+tk.Ticket,
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {ce.a.ts.URL}}}) // as the page on host a sends
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("attach through host a with its ticket: %d %v", status, err)
	}
	defer conn.CloseNow()
	page := &viewer{t: t, name: "page", c: &AttachConn{conn: conn}}
	v.typeText("echo page-$((1+1))\r")
	page.waitOutput("page-2")
}

// A session is made on the host asked for, or the one Place picks; the
// answer names it. A host that is unknown or down is refused naming
// "host".
func TestForwardCreatePlaced(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	var mu sync.Mutex
	var made []pool.CreateRequest
	create := fpB.CreateFunc
	fpB.CreateFunc = func(ctx context.Context, r pool.CreateRequest) (pool.Session, error) {
		mu.Lock()
		made = append(made, r)
		mu.Unlock()
		return create(ctx, r)
	}
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.hosts["c"] = ClusterHost{ID: "c", Advertise: "http://127.0.0.1:1"} // known, not alive
	ctx := fwdContext(t)

	asked, err := ce.a.client.Create(ctx, CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: "/r1", Agent: "demo"}, Host: "b"})
	if err != nil || asked.Host != "b" || asked.Repo != "/r1" {
		t.Fatalf("Create(host b) through a = %+v, %v; want the session, on host b", asked, err)
	}
	ce.m.mu.Lock()
	ce.m.placeOn = "b"
	ce.m.mu.Unlock()
	placed, err := ce.a.client.Create(ctx, CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: "/r2", Agent: "demo"}})
	if err != nil || placed.Host != "b" {
		t.Fatalf("Create() through a, placed on b = %+v, %v; want the session, on host b", placed, err)
	}
	mu.Lock()
	if len(made) != 2 || made[0].Repo != "/r1" || made[1].Repo != "/r2" {
		t.Errorf("host b made %+v; want the sessions of /r1 and /r2", made)
	}
	mu.Unlock()

	for _, c := range []struct {
		host   string
		status int
		code   string
	}{
		{"nowhere", http.StatusBadRequest, CodeBadRequest},
		{"c", http.StatusConflict, CodeHostDown},
	} {
		_, err := ce.a.client.Create(ctx, CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: "/r3", Agent: "demo"}, Host: c.host})
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != c.status || ae.Code != c.code || ae.Field != "host" || !strings.Contains(ae.Message, c.host) {
			t.Errorf("Create(host %q) error = %v; want %d %s naming field host and the host", c.host, err, c.status, c.code)
		}
	}
}

// A daemon alone refuses a "host" rather than ignore it.
func TestCreateHostWithoutCluster(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	_, err := e.client.Create(fwdContext(t), CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: "/r", Agent: "demo"}, Host: "b"})
	if !IsCode(err, CodeBadRequest) || !strings.Contains(err.Error(), "host") {
		t.Errorf("Create(host b) on a daemon alone error = %v; want bad_request naming host", err)
	}
}

// A forwarded request that reaches a host that does not own the session
// is refused session_moved, never forwarded again.
func TestForwardedNotForwardedAgain(t *testing.T) {
	fpB := &fakePool{}
	prompts := promptRecorder(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.owners["s"] = "b"
	url := ce.a.ts.URL + "/v1/sessions/s/prompt"
	st, body := rawCall(t, http.MethodPost, url, `{"text":"hi"}`, signedHeader(t, http.MethodPost, url, `{"text":"hi"}`, "a", "c", time.Now(), clusterKey))
	if st != http.StatusConflict || !strings.Contains(body, CodeSessionMoved) || !strings.Contains(body, `\"b\"`) {
		t.Errorf("forwarded prompt to host a, which does not own s = %d %s; want 409 %s naming host b", st, body, CodeSessionMoved)
	}
	if got := prompts(); len(got) != 0 {
		t.Errorf("host b got prompts %+v; want none: a forwarded request is not forwarded again", got)
	}
}

// The Client sends a request refused session_moved once more: the
// session moved while the request was on its way, and the second try
// reaches its new owner.
func TestClientRetriesSessionMoved(t *testing.T) {
	fpA := &fakePool{}
	prompts := promptRecorder(fpA)
	ce := newClusterEnv(t, fpA, refusingPool(t, "b"))
	asked := 0
	ce.m.owner = func(self, _ string) (string, error) {
		if self == "a" {
			if asked++; asked == 1 {
				return "b", nil // a still thinks b owns it...
			}
		}
		return "a", nil // ...which b has handed over to a
	}
	if _, err := ce.a.client.Prompt(fwdContext(t), "s", "", "moved", false); err != nil {
		t.Fatalf("Prompt(s) while it moves error = %v; want it sent again to the new owner", err)
	}
	if got := prompts(); len(got) != 1 {
		t.Errorf("host a got prompts %+v; want the one", got)
	}
}

// A session whose host is gone and not yet taken over is answered 503
// with Retry-After; a host that does not answer, 503 naming it, with Retry-After.
func TestForwardOwnerGone(t *testing.T) {
	ce := newClusterEnv(t, refusingPool(t, "a"), refusingPool(t, "b"))
	ce.m.hosts["dead"] = ClusterHost{ID: "dead", Advertise: "http://127.0.0.1:1"}
	ce.m.owners["s"] = "dead"
	req, err := http.NewRequest(http.MethodGet, ce.a.ts.URL+"/v1/sessions/s", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ce.a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("GET a session whose host is gone = %d (Retry-After %q); want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	ce.m.mu.Lock()
	ce.m.alive["dead"] = true // alive, says the store; nobody listens
	ce.m.mu.Unlock()
	_, err = ce.a.client.Session(fwdContext(t), "s")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.RetryAfter == 0 || ae.Code != CodeHostUnreachable || !strings.Contains(ae.Message, `"dead"`) {
		t.Errorf("Session(s) whose host does not answer error = %v; want 503 %s naming the host, with Retry-After", err, CodeHostUnreachable)
	}
}

// A user token of another live host of the cluster is accepted.
func TestKnownTokenAccepted(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ctx := fwdContext(t)
	withA := &Client{BaseURL: ce.b.ts.URL, Token: ce.m.tokens["a"]}
	if _, err := withA.Sessions(ctx); err != nil {
		t.Errorf("Sessions() on host b with host a's token error = %v; want it accepted", err)
	}
	other := &Client{BaseURL: ce.b.ts.URL, Token: "token-of-nobody-0123"}
	if _, err := other.Sessions(ctx); !IsCode(err, CodeUnauthorized) {
		t.Errorf("Sessions() on host b with an unknown token error = %v; want unauthorized", err)
	}
	ce.m.mu.Lock()
	ce.m.alive["a"] = false
	ce.m.mu.Unlock()
	if _, err := withA.Sessions(ctx); !IsCode(err, CodeUnauthorized) {
		t.Errorf("Sessions() on host b with a dead host's token error = %v; want unauthorized", err)
	}
}

// A session listed carries its host.
func TestSessionHostJSON(t *testing.T) {
	b, err := json.Marshal(pool.Session{ID: "s", Host: "b"})
	if err != nil || !strings.Contains(string(b), `"host":"b"`) {
		t.Errorf("json of a session on host b = %s, %v; want \"host\":\"b\"", b, err)
	}
}

// Every route about one session is forwarded, but for the attach ticket
// (a credential of the host the page talks to); the others are not.
func TestSessionParam(t *testing.T) {
	for pattern, want := range map[string]string{
		"GET /v1/sessions/{id}":                        "id",
		"DELETE /v1/sessions/{id}":                     "id",
		"POST /v1/sessions/{id}/prompt":                "id",
		"GET /v1/sessions/{id}/events":                 "id",
		"GET /v1/sessions/{id}/attach":                 "id",
		"POST /v1/sessions/{id}/permissions/{request}": "id",
		"PUT /v1/sessions/{id}/agents/{agent}/config":  "id",
		"DELETE /v1/pool/{session}/{agent}":            "session",
		"POST /v1/sessions/{id}/attach-ticket":         "",
		"POST /v1/sessions":                            "",
		"GET /v1/sessions":                             "",
		"GET /v1/attempts/{id}":                        "",
		"GET /v1/pool":                                 "",
	} {
		if got := sessionParam(pattern); got != want {
			t.Errorf("sessionParam(%q) = %q; want %q", pattern, got, want)
		}
	}
}

// Shutdown ends the event streams a host forwards, as it ends its own.
func TestForwardedStreamEndsAtShutdown(t *testing.T) {
	fpB := &fakePool{}
	sessionWorld(fpB)
	log := newLog(t, 64)
	streamWorld(fpB, log)
	ce := newClusterEnv(t, refusingPool(t, "a"), fpB)
	ce.m.owners["s1"] = "b"
	log.Publish("s1", backends.EventTurnStarted, 1, map[string]any{"turn": 1})
	got := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- ce.a.client.Events(fwdContext(t), "s1", 0, func(backends.Event) error {
			close(got)
			return nil
		})
	}()
	select {
	case <-got:
	case <-time.After(fwdWait):
		t.Fatal("no event through host a")
	}
	shut := make(chan struct{})
	go func() { ce.a.srv.Shutdown(); close(shut) }()
	select {
	case <-shut:
	case <-time.After(fwdWait):
		t.Fatal("host a's Shutdown() did not return with a forwarded stream open")
	}
	ce.b.srv.Shutdown() // b's stream ends: the client stops reconnecting
	if err := <-done; err == nil {
		t.Errorf("Events through a host shut down = nil; want an error")
	}
}
