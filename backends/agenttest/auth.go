package agenttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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

// homePath is p with a leading "~/" replaced by the agent's $HOME.
func homePath(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(os.Getenv("HOME"), rest)
	}
	return p
}

// makeStateDir makes dir and writes a file in it, failing as Node words
// it ("Error: EACCES: permission denied, mkdir '/home/u/.augment'").
func makeStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("Error: %s: %s, mkdir '%s'", errnoName(err), errnoText(err), dir)
	}
	f := filepath.Join(dir, "state.json")
	if err := os.WriteFile(f, []byte("{}\n"), 0o600); err != nil {
		return fmt.Errorf("Error: %s: %s, open '%s'", errnoName(err), errnoText(err), f)
	}
	return nil
}

// errnoName and errnoText are Node's words for err's errno.
func errnoName(err error) string {
	var no syscall.Errno
	if !errors.As(err, &no) {
		return "EIO"
	}
	switch no {
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EROFS:
		return "EROFS"
	case syscall.ENOENT:
		return "ENOENT"
	}
	return "E" + strings.ToUpper(strings.ReplaceAll(no.Error(), " ", "_"))
}

func errnoText(err error) string {
	var no syscall.Errno
	if !errors.As(err, &no) {
		return err.Error()
	}
	if no == syscall.ENOENT {
		return "no such file or directory"
	}
	return no.Error()
}
