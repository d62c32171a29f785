package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/registry"
)

// TestLoginInTerminalGuards: a terminal login method is the agent's words
// run unconfined as the user. One that sets a variable making a program
// load other code is refused; any other is shown and, without a terminal
// to say yes on or --yes, not run.
func TestLoginInTerminalGuards(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	p := registry.ProviderStatus{ID: "fake", Path: "/bin/sh", Command: []string{"sh"}}
	for _, tc := range []struct {
		name string
		m    backends.AuthMethod
		want string
	}{
		{"preload", backends.AuthMethod{ID: "t", Name: "T", Type: backends.AuthTerminal,
			Args: []string{"-c", "touch " + marker}, Env: map[string]string{"LD_PRELOAD": "/tmp/evil.so"}}, "LD_PRELOAD"},
		{"node options", backends.AuthMethod{ID: "t", Name: "T", Type: backends.AuthTerminal,
			Args: []string{"-c", "touch " + marker}, Env: map[string]string{"NODE_OPTIONS": "--require /tmp/evil.js"}}, "NODE_OPTIONS"},
		{"no terminal", backends.AuthMethod{ID: "t", Name: "T", Type: backends.AuthTerminal,
			Args: []string{"-c", "touch " + marker}, Env: map[string]string{"FAKE_LOGIN": "1"}}, "not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c := &cli{stdin: strings.NewReader("y\n"), stdout: &out, stderr: &out}
			err := c.loginInTerminal(context.Background(), nil, p, tc.m, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("loginInTerminal = %v; want an error naming %q", err, tc.want)
			}
			if _, serr := os.Stat(marker); serr == nil {
				t.Fatal("the agent's command ran")
			}
			if tc.want == "not run" && !strings.Contains(out.String(), "FAKE_LOGIN=1 /bin/sh -c") {
				t.Errorf("the command was not shown:\n%s", out.String())
			}
		})
	}
}
