package agenttest

import (
	"encoding/json"
	"os"
	"slices"
)

// The fake's login: Script.AuthMethods, Script.LoginFile and
// Script.LoginEnv.

// authMethods is initialize's authMethods.
func (a *agent) authMethods() json.RawMessage {
	if len(a.script.AuthMethods) == 0 {
		return json.RawMessage(`[]`)
	}
	return a.script.AuthMethods
}

// needsLogin reports whether method must be refused until the user logs in.
func (a *agent) needsLogin(method string) bool {
	if !slices.Contains([]string{"session/new", "session/load", "session/resume", "session/prompt"}, method) {
		return false
	}
	if a.script.LoginEnv != "" && os.Getenv(a.script.LoginEnv) == "" {
		return true
	}
	if a.script.LoginFile == "" {
		return false
	}
	_, err := os.Stat(a.script.LoginFile)
	return err != nil
}

// authenticate logs in with a method of type "agent" by creating the
// login file.
func (a *agent) authenticate(m message) {
	var p struct {
		MethodID string `json:"methodId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	var methods []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(a.authMethods(), &methods)
	for _, am := range methods {
		if am.ID != p.MethodID || am.Type != "" && am.Type != "agent" {
			continue
		}
		if a.script.LoginFile != "" {
			if err := os.WriteFile(a.script.LoginFile, []byte("credentials\n"), 0o600); err != nil {
				a.respondErr(m.ID, -32603, "Internal error", map[string]any{"details": err.Error()})
				return
			}
		}
		a.respond(m.ID, map[string]any{})
		return
	}
	a.respondErr(m.ID, -32602, "Invalid params", map[string]any{"details": "no such auth method " + p.MethodID})
}
