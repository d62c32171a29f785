package acp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

const fakeAuthMethods = `[
	{"id": "oauth", "name": "Log in with a browser", "description": "Opens a browser"},
	{"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "FAKE_API_KEY"}], "link": "https://example.invalid/keys"},
	{"id": "tui", "name": "In a terminal", "type": "terminal", "args": ["--login"], "env": {"FAKE_LOGIN": "1"}}
]`

// TestLogin: an agent that needs a login refuses to start a session with
// an error wrapping ErrAuthRequired and says how to log in; Prober.Login
// with its "agent" method logs it in, after which it starts; a method the
// user must carry out is not sent to the agent.
func TestLogin(t *testing.T) {
	login := filepath.Join(t.TempDir(), "login")
	s := agenttest.Script{AuthMethods: json.RawMessage(fakeAuthMethods), LoginFile: login}
	h := newBackend(t, s, acp.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := h.b.Start(ctx, "")
	if !errors.Is(err, backends.ErrAuthRequired) || !strings.Contains(err.Error(), "Authentication required") {
		t.Fatalf("Start of an agent that needs a login = %v; want ErrAuthRequired", err)
	}

	probe, err := acp.Prober{}.Probe(ctx, agenttest.Spec("fake", agenttest.Script{AuthMethods: json.RawMessage(fakeAuthMethods)}))
	if err != nil {
		t.Fatal(err)
	}
	want := []backends.AuthMethod{
		{ID: "oauth", Name: "Log in with a browser", Description: "Opens a browser", Type: backends.AuthAgent},
		{ID: "key", Name: "API key", Type: backends.AuthEnvVar, Vars: []string{"FAKE_API_KEY"}, Link: "https://example.invalid/keys"},
		{ID: "tui", Name: "In a terminal", Type: backends.AuthTerminal, Args: []string{"--login"}, Env: map[string]string{"FAKE_LOGIN": "1"}},
	}
	if g, w := mustJSON(t, probe.Auth), mustJSON(t, want); g != w {
		t.Errorf("Info.Auth = %s; want %s", g, w)
	}

	spec := agenttest.Spec("fake", s)
	if err := (acp.Prober{}).Login(ctx, spec, "key"); err == nil || !strings.Contains(err.Error(), "env_var") {
		t.Errorf("Login with an env_var method = %v; want a refusal naming its type", err)
	}
	if err := (acp.Prober{}).Login(ctx, spec, "nope"); err == nil || !strings.Contains(err.Error(), `no login method "nope"`) {
		t.Errorf("Login with an unknown method = %v", err)
	}
	if _, err := os.Stat(login); err == nil {
		t.Fatal("logged in by a refused method")
	}
	if err := (acp.Prober{}).Login(ctx, spec, "oauth"); err != nil {
		t.Fatalf("Login(oauth) = %v", err)
	}
	h2 := newBackend(t, s, acp.Config{})
	h2.start(t, "")
	if _, err := h2.prompt(t, "x"); err != nil {
		t.Errorf("prompt after the login: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
