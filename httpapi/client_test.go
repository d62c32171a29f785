package httpapi

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentpool/agentpool/pool"
	"github.com/google/go-cmp/cmp"
)

func TestClientCalls(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	c, ctx := e.client, t.Context()

	s, err := c.CreateSession(ctx, pool.CreateRequest{ID: "x1", Repo: "/r", Agent: "demo"})
	if err != nil || s.ID != "x1" || s.Repo != "/r" {
		t.Errorf("CreateSession() = %+v, %v; want x1 on /r", s, err)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("Sessions() = %v, %v; want 2", list, err)
	}
	if _, err := c.Session(ctx, "missing"); !IsCode(err, CodeNotFound) {
		t.Errorf("Session(missing) error = %v; want not_found", err)
	}
	turn, err := c.Prompt(ctx, "s1", "demo", "hi", false)
	if err != nil || turn.ID != 7 {
		t.Errorf("Prompt() = %+v, %v; want turn 7", turn, err)
	}
	turn, err = c.Prompt(ctx, "s1", "", "hi", true)
	if err != nil || turn.StopReason != "end_turn" {
		t.Errorf("Prompt(wait) = %+v, %v; want an ended turn", turn, err)
	}
	if _, err := c.Prompt(ctx, "busy", "", "hi", false); !IsCode(err, CodeBusy) {
		t.Errorf("Prompt(busy) error = %v; want busy", err)
	}
	var ae *Error
	if _, err := c.Prompt(ctx, "s1", "", "", false); !errors.As(err, &ae) || ae.Field != "text" || ae.Status != 400 {
		t.Errorf("Prompt(empty text) error = %#v; want a 400 naming text", err)
	}
	if err := c.Cancel(ctx, "noturn"); !IsCode(err, CodeNoTurn) {
		t.Errorf("Cancel(noturn) error = %v; want no_turn", err)
	}
	if turn, err := c.Retry(ctx, "s1"); err != nil || turn.ID != 8 {
		t.Errorf("Retry() = %+v, %v; want turn 8", turn, err)
	}
	if turns, err := c.Turns(ctx, "s1"); err != nil || len(turns) != 2 {
		t.Errorf("Turns() = %v, %v; want 2", turns, err)
	}
	if turn, err := c.Turn(ctx, "s1", 2, true); err != nil || turn.ID != 2 || turn.StopReason == "" {
		t.Errorf("Turn(2, wait) = %+v, %v; want turn 2 ended", turn, err)
	}
	pend, err := c.Permissions(ctx, "s1")
	if err != nil || len(pend) != 1 || pend[0].ID != "r1" {
		t.Errorf("Permissions() = %+v, %v; want r1", pend, err)
	}
	if err := c.Answer(ctx, "s1", "r1", "allow_always"); err != nil {
		t.Errorf("Answer() error = %v", err)
	}
	if err := c.Answer(ctx, "s1", "r1", "perhaps"); !IsCode(err, CodeInvalidChoice) {
		t.Errorf("Answer(perhaps) error = %v; want invalid_choice", err)
	}
	d, err := c.Diff(ctx, "s1", 2)
	if err != nil || d.Stat.Files != 1 || !strings.Contains(d.Patch, "+y") {
		t.Errorf("Diff() = %+v, %v; want one file", d, err)
	}
	if err := c.Restore(ctx, "s1", 1, false); err != nil {
		t.Errorf("Restore() error = %v", err)
	}
	ps, err := c.Pool(ctx)
	if err != nil || len(ps.Backends) != 1 || ps.Stats.Spawns != 3 {
		t.Errorf("Pool() = %+v, %v; want one backend and 3 spawns", ps, err)
	}
	res, err := c.CloseSession(ctx, "s1", true)
	want := pool.CloseResult{Session: "s1", Worktree: pool.RemoveResult{Branch: "agentpool/s1", Discarded: true}}
	if err != nil || !cmp.Equal(res, want) {
		t.Errorf("CloseSession(discard) = %+v, %v; want %+v", res, err, want)
	}
	if _, err := (&Client{BaseURL: e.ts.URL, Token: "wrong"}).Sessions(ctx); !IsCode(err, CodeUnauthorized) {
		t.Errorf("Sessions() with a wrong token error = %v; want unauthorized", err)
	}
}

// editingTransport edits the providers file by hand just before the first
// PATCH goes out, as a person would between the client's read and write.
type editingTransport struct {
	file    string
	content string
	done    atomic.Bool
}

func (t *editingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPatch && t.done.CompareAndSwap(false, true) {
		if err := os.WriteFile(t.file, []byte(t.content), 0o600); err != nil {
			return nil, err
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestSetProviderEnabledKeepsHandEdits(t *testing.T) {
	fp := &fakePool{}
	sessionWorld(fp)
	e := newTestEnv(t, fp, nil)
	writeFile(t, e.file, `{"version": 1, "providers": {"qwen": {"env": {"A": "1"}}}}`)
	if err := e.reg.Reload(); err != nil {
		t.Fatal(err)
	}
	tr := &editingTransport{file: e.file, content: `{"version": 1, "providers": {"qwen": {"env": {"A": "1"}, "description": "hand edit"}}}`}
	c := &Client{BaseURL: e.ts.URL, Token: e.token, HTTP: &http.Client{Transport: tr}}
	res, err := c.SetProviderEnabled(t.Context(), "qwen", false)
	if err != nil || res.Provider == nil || res.Provider.Enabled || res.ETag == "" {
		t.Fatalf("SetProviderEnabled(qwen, false) = %+v, %v; want qwen disabled and an ETag", res, err)
	}
	b, _ := os.ReadFile(e.file)
	for _, want := range []string{`"hand edit"`, `"A": "1"`, `"enabled": false`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("providers file after the patch = %s; want it to keep %s", b, want)
		}
	}
	if !tr.done.Load() {
		t.Errorf("the hand edit never happened")
	}
}
