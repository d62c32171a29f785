package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/coder/websocket"
)

// newTicket asks for an attach ticket of session with the headers given.
func newTicket(t *testing.T, e *testEnv, session string, header map[string]string) string {
	t.Helper()
	st, body := credCall(t, e.ts.URL, "POST", "/v1/sessions/"+url.PathEscape(session)+"/attach-ticket", "", header)
	var tk AttachTicket
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &tk) != nil || tk.Ticket == "" || tk.ExpiresIn != 30 {
		t.Fatalf("POST attach-ticket = %d %s; want 201 with a ticket for 30 s", st, body)
	}
	return tk.Ticket
}

// dialStatus dials the attach stream with only the query and headers
// given and returns the status of the refusal (101 if it was accepted).
func dialStatus(t *testing.T, e *testEnv, session, query string, header http.Header) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, e.ts.URL+"/v1/sessions/"+session+"/attach?"+query, &websocket.DialOptions{HTTPHeader: header})
	if err == nil {
		_ = c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("Dial error = %v", err)
	}
	return resp.StatusCode
}

// An attach ticket works once, for its session only, while the credential
// that asked for it lives, and never from another origin.
func TestAttachTicket(t *testing.T) {
	e := attachEnv(t, newBash(t, nil), nil)
	token := map[string]string{"Authorization": "Bearer " + testToken}

	// 409 "not a terminal" means the ticket was accepted.
	tk := newTicket(t, e, "s", token)
	if st := dialStatus(t, e, "s", "agent=acp&ticket="+tk, nil); st != http.StatusConflict {
		t.Errorf("attach with a fresh ticket = %d; want 409 (admitted)", st)
	}
	if st := dialStatus(t, e, "s", "agent=acp&ticket="+tk, nil); st != http.StatusUnauthorized {
		t.Errorf("attach with a used ticket = %d; want 401", st)
	}
	other := newTicket(t, e, "other", token)
	if st := dialStatus(t, e, "s", "agent=acp&ticket="+other, nil); st != http.StatusUnauthorized {
		t.Errorf("attach to s with a ticket of another session = %d; want 401", st)
	}

	// Another origin is refused before the ticket is looked at; the same
	// ticket then works from the page's own origin.
	tk = newTicket(t, e, "s", token)
	if st := dialStatus(t, e, "s", "agent=acp&ticket="+tk, http.Header{"Origin": {"http://127.0.0.1:1"}}); st != http.StatusForbidden {
		t.Errorf("cross-origin attach with a ticket = %d; want 403", st)
	}
	if st := dialStatus(t, e, "s", "agent=acp&ticket="+tk, http.Header{"Origin": {e.ts.URL}}); st != http.StatusConflict {
		t.Errorf("same-origin attach with the ticket = %d; want 409 (admitted)", st)
	}

	// A page's ticket dies with its credential.
	l := pageLogin(t, e)
	page := bearerOf(pageRunBearer(t, e.ts.URL, l))
	tk = newTicket(t, e, "s", page)
	if st, _ := credCall(t, e.ts.URL, "POST", "/v1/logout", "", page); st != http.StatusNoContent {
		t.Fatalf("logout = %d", st)
	}
	if st := dialStatus(t, e, "s", "agent=acp&ticket="+tk, nil); st != http.StatusUnauthorized {
		t.Errorf("attach with the ticket of a logged-out page = %d; want 401", st)
	}
	if st, _ := credCall(t, e.ts.URL, "POST", "/v1/sessions/s/attach-ticket", "", nil); st != http.StatusUnauthorized {
		t.Errorf("attach-ticket without a credential = %d; want 401", st)
	}

	// A page's ticket opens the real terminal.
	l = pageLogin(t, e)
	tk = newTicket(t, e, "s", bearerOf(pageRunBearer(t, e.ts.URL, l)))
	ctx, cancel := context.WithTimeout(context.Background(), attachWait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, e.ts.URL+"/v1/sessions/s/attach?agent=shell&ticket="+tk, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {e.ts.URL}}})
	if err != nil {
		t.Fatalf("attach with a page's ticket: %v", err)
	}
	conn := &AttachConn{conn: c}
	t.Cleanup(func() { _ = conn.Close() })
	v := &viewer{t: t, name: "page", c: conn}
	v.waitOutput("agentpool$")
}
