package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

func TestRunClientDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, cmd := range []string{"serve", "version", "demo-agent", "nonsense"} {
		handled, err := runClient(t.Context(), cmd, nil, ClientEnv{Home: t.TempDir()}, strings.NewReader(""), &out, &errOut)
		if handled || err != nil {
			t.Errorf("runClient(%q) = %v, %v; want not handled", cmd, handled, err)
		}
	}
	handled, err := runClient(t.Context(), "ps", nil, ClientEnv{Home: t.TempDir()}, strings.NewReader(""), &out, &errOut)
	if !handled || err == nil || !strings.Contains(err.Error(), "agentpool serve") {
		t.Errorf("runClient(ps) without a daemon = %v, %v; want handled, an error telling to run 'agentpool serve'", handled, err)
	}
}

func TestHelp(t *testing.T) {
	e := newCLIEnv(t)
	for _, args := range [][]string{
		{"providers", "--help"}, {"providers", "list", "--help"}, {"providers", "enable", "-h"}, {"providers", "disable", "--help"},
		{"providers", "refresh", "--help"}, {"session", "--help"}, {"session", "new", "--help"}, {"session", "list", "--help"},
		{"session", "show", "--help"}, {"session", "review", "--help"}, {"session", "push", "--help"}, {"session", "pr", "--help"}, {"session", "close", "--help"}, {"prompt", "--help"}, {"prompt", "s1", "-h"},
		{"events", "--help"}, {"diff", "--help"}, {"restore", "--help"}, {"cancel", "--help"}, {"permissions", "--help"},
		{"permissions", "list", "--help"}, {"permissions", "answer", "--help"}, {"ps", "--help"},
	} {
		out, errOut, err := e.run(t, t.Context(), false, false, "", args...)
		if err != nil || !strings.HasPrefix(out, "Usage: agentpool "+args[0]) || errOut != "" {
			t.Errorf("%q = stdout %q, stderr %q, %v; want the usage on stdout and no error", args, out, errOut, err)
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	e := newCLIEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"session"}, "a command is required"},
		{[]string{"session", "open"}, `unknown command "open"`},
		{[]string{"session", "show"}, "wrong number of arguments"},
		{[]string{"session", "show", "a", "b"}, "wrong number of arguments"},
		{[]string{"session", "close", "missing"}, "not_found"},
		{[]string{"providers", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"providers", "enable"}, "wrong number of arguments"},
		{[]string{"restore", "s1"}, "--turn is required"},
		{[]string{"diff", "s1", "--turn", "x"}, "invalid value"},
		{[]string{"permissions", "answer", "s1", "r1"}, "wrong number of arguments"},
		{[]string{"permissions", "answer", "s1", "r9", "allow"}, "unknown_request"},
		{[]string{"ps", "extra"}, "wrong number of arguments"},
	} {
		_, errOut, err := e.run(t, t.Context(), false, false, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q error = %v (stderr %q); want %q", tc.args, err, errOut, tc.want)
		}
	}
}

func TestSessionCommands(t *testing.T) {
	e := newCLIEnv(t)
	repo := t.TempDir()
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	sub := filepath.Join(repo, "sub", "dir")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	top, _ := filepath.EvalSymlinks(repo)
	out, errOut, err := e.run(t, t.Context(), false, false, "", "session", "new", "--title", "demo run")
	if err != nil || !strings.Contains(out, "session s-new created") || !strings.Contains(out, "repo      "+top) ||
		!strings.Contains(out, "agent     demo") || !strings.Contains(out, `Next: agentpool prompt s-new "describe what you want"`) {
		t.Errorf("session new = %q, %v; want the session on %s with agent demo and the next step", out, err, top)
	}
	if !strings.Contains(errOut, "creating the session's worktree of "+top+"… done") {
		t.Errorf("session new stderr = %q; want progress", errOut)
	}
	out, _, err = e.run(t, t.Context(), false, false, "", "session", "new", "--repo", "/elsewhere", "--agent", "claude", "--json")
	var s pool.Session
	if err != nil || json.Unmarshal([]byte(out), &s) != nil || s.Repo != "/elsewhere" || s.ActiveAgent != "claude" {
		t.Errorf("session new --repo --agent --json = %q, %v; want JSON of a claude session on /elsewhere", out, err)
	}
	t.Chdir(t.TempDir())
	if _, _, err := e.run(t, t.Context(), false, false, "", "session", "new"); err == nil || !strings.Contains(err.Error(), "not inside a git repository") {
		t.Errorf("session new outside a repository error = %v; want not inside a git repository", err)
	}

	out, _, err = e.run(t, t.Context(), false, false, "", "session", "list")
	if err != nil || !strings.Contains(out, "ID") || !strings.Contains(out, "s1") || !strings.Contains(out, "/repo") {
		t.Errorf("session list = %q, %v; want a table with s1", out, err)
	}
	out, _, err = e.run(t, t.Context(), false, false, "", "session", "show", "s1")
	for _, want := range []string{"worktree  /data/worktrees/s1", "branch    agentpool/s1", "4242", "1m15s", "64.0 MiB", "first request", "end_turn"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("session show = %q, %v; want %q in it", out, err, want)
		}
	}
	out, errOut, err = e.run(t, t.Context(), false, false, "", "session", "close", "s1")
	if err != nil || out != "session s1 closed; its work is committed on branch agentpool/s1 (0123456789ab)\n" || !strings.Contains(errOut, "done") {
		t.Errorf("session close = %q (stderr %q), %v", out, errOut, err)
	}
	out, _, err = e.run(t, t.Context(), false, false, "", "session", "close", "s1", "--discard")
	if err != nil || !strings.Contains(out, "discarded") {
		t.Errorf("session close --discard = %q, %v; want discarded", out, err)
	}
}

func TestProvidersCommands(t *testing.T) {
	e := newCLIEnv(t)
	out, _, err := e.run(t, t.Context(), false, false, "", "providers", "list")
	if err != nil || !strings.Contains(out, "ID") || !regexpMatch(`(?m)^demo +acp +yes +ready `, out) {
		t.Errorf("providers list = %q, %v; want demo ready", out, err)
	}
	out, _, err = e.run(t, t.Context(), false, false, "", "providers", "disable", "gemini", "qwen")
	if err != nil || out != "gemini disabled\nqwen disabled\n" {
		t.Errorf("providers disable = %q, %v", out, err)
	}
	file := filepath.Join(e.home, "providers.json")
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), `"gemini": {`) || !strings.Contains(string(b), `"enabled": false`) {
		t.Errorf("providers.json after disable = %s; want gemini disabled", b)
	}
	out, _, err = e.run(t, t.Context(), false, false, "", "providers", "enable", "gemini")
	if err != nil || !strings.HasPrefix(out, "gemini enabled; status ") {
		t.Errorf("providers enable = %q, %v; want gemini enabled and its status", out, err)
	}
	if p, _ := e.reg.Snapshot().Provider("gemini"); !p.Enabled {
		t.Errorf("gemini after enable = %+v; want enabled", p)
	}
	if _, _, err := e.run(t, t.Context(), false, false, "", "providers", "enable", "nope"); err == nil {
		t.Errorf("providers enable nope error = nil; want an error")
	}
	if err := os.WriteFile(file, []byte(`{"version": 1, "providers": {"claude": {"enabeld": true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := e.run(t, t.Context(), false, false, "", "providers", "refresh")
	if err == nil || !strings.Contains(errOut, "providers.claude.enabeld") {
		t.Errorf("providers refresh of a bad file = %v, stderr %q; want an error naming providers.claude.enabeld", err, errOut)
	}
	out, _, err = e.run(t, t.Context(), false, false, "", "providers", "list")
	if err != nil || !strings.Contains(out, "is rejected") {
		t.Errorf("providers list with a bad file = %q, %v; want the diagnostic shown", out, err)
	}
	if err := os.WriteFile(file, []byte(`{"version": 1, "providers": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = e.run(t, t.Context(), false, false, "", "providers", "refresh", "demo")
	if err == nil || !strings.Contains(errOut, "probing demo… failed") {
		t.Errorf("providers refresh demo (no prober) = %v, stderr %q; want the probe's failure shown", err, errOut)
	}
}

func TestWorkCommands(t *testing.T) {
	e := newCLIEnv(t)
	e.log.Append(backends.Event{Session: "s1", Agent: "demo", Turn: 1, Type: backends.EventTurnStarted, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.Local),
		Data: backends.MustJSON(map[string]any{"prompt": "hello\nthere"})})
	e.log.Append(backends.Event{Session: "s1", Agent: "demo", Turn: 1, Type: backends.EventMessageChunk, Time: time.Date(2025, 1, 2, 3, 4, 6, 0, time.Local),
		Data: backends.MustJSON(backends.ChunkData{Role: "agent", Text: "hi!"})})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ps"}, "SESSION  AGENT  KIND  PID   STATE  IDLE   RSS       RESTARTS  CONFINED\ns1       demo   acp   4242  idle   1m15s  64.0 MiB  0         -\n"},
		{[]string{"diff", "s1", "--stat"}, "A  AGENTPOOL_DEMO.md  +5 -0\n1 file changed, +5 -0\n"},
		{[]string{"diff", "s1", "--turn", "3"}, "diff --git a/AGENTPOOL_DEMO.md b/AGENTPOOL_DEMO.md\n--- /dev/null\n+++ b/AGENTPOOL_DEMO.md\n@@ -0,0 +1 @@\n+# Written\n"},
		{[]string{"events", "s1"}, "#1     03:04:05 turn.started           demo turn 1  hello there\n#2     03:04:06 message.chunk          demo turn 1  agent: hi!\n"},
		{[]string{"events", "s1", "--after", "1"}, "#2     03:04:06 message.chunk          demo turn 1  agent: hi!\n"},
		{[]string{"permissions", "list", "s1"}, "REQUEST  AGENT  ACTION  RISK    WAITS UNTIL  TITLE                    OPTIONS\nr1       demo   edit    medium  03:09:00     Write AGENTPOOL_DEMO.md  allow_once,reject_once\n"},
		{[]string{"permissions", "answer", "s1", "r1", "deny"}, "request r1 answered: deny\n"},
		{[]string{"restore", "s1", "--turn", "1", "--after"}, "worktree of s1 restored to its state after turn 1\n"},
		{[]string{"cancel", "s1"}, "turn of s1 cancelled\n"},
	} {
		out, errOut, err := e.run(t, t.Context(), false, false, "", tc.args...)
		if err != nil || out != tc.want {
			t.Errorf("%q = %q (stderr %q), %v; want %q", tc.args, out, errOut, err, tc.want)
		}
	}
	out, _, err := e.run(t, t.Context(), false, false, "", "events", "s1", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var ev backends.Event
	if err != nil || len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &ev) != nil || ev.Seq != 2 {
		t.Errorf("events --json = %q, %v; want 2 JSON lines", out, err)
	}
	out, _, _ = e.run(t, t.Context(), false, true, "", "diff", "s1")
	if !strings.Contains(out, ansiGreen+"+# Written"+ansiReset) {
		t.Errorf("diff on a terminal = %q; want added lines in green", out)
	}
}

func TestEventsFollow(t *testing.T) {
	e := newCLIEnv(t)
	go func() {
		for e.log.Subscribers() == 0 {
			time.Sleep(time.Millisecond)
		}
		e.log.Publish("s1", backends.EventSessionClosed, 0, map[string]any{"discard": false})
		e.log.DropAll() // dropped: the client reconnects after the event
	}()
	// --follow reads on until interrupted (here: a timeout), never printing
	// an event twice across the reconnection.
	ctx, cancel := contextWithTimeout(t, 500*time.Millisecond)
	defer cancel()
	out, _, err := e.run(t, ctx, false, false, "", "events", "s1", "-f")
	if err != nil || !strings.Contains(out, "session.closed") || strings.Count(out, "\n") != 1 {
		t.Errorf("events --follow = %q, %v; want the one event, once", out, err)
	}
}

func TestClientDiscovery(t *testing.T) {
	home := t.TempDir()
	c := &cli{env: ClientEnv{Home: home}}
	if _, err := c.client(); err == nil || !strings.Contains(err.Error(), "agentpool serve") {
		t.Errorf("client() without daemon.json error = %v; want a hint to run agentpool serve", err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := writeDaemonFile(home, daemonInfo{Addr: "127.0.0.1:1", PID: dead.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(); err == nil || !strings.Contains(err.Error(), "is not running") {
		t.Errorf("client() with a dead daemon's pid error = %v; want not running", err)
	}
	if err := writeDaemonFile(home, daemonInfo{Addr: "127.0.0.1:1", PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, tokenFileName), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := c.client()
	if err != nil || api.BaseURL != "http://127.0.0.1:1" || api.Token != "tok" {
		t.Errorf("client() = %+v, %v; want http://127.0.0.1:1 with token tok", api, err)
	}
	env := newClientEnv(home, func(k string) string {
		return map[string]string{envAddr: "https://example.test:8443", envToken: "other"}[k]
	})
	api, err = (&cli{env: env}).client()
	if err != nil || api.BaseURL != "https://example.test:8443" || api.Token != "other" {
		t.Errorf("client() with overrides = %+v, %v; want the overrides", api, err)
	}
	var out, errOut bytes.Buffer
	_, err = runClient(t.Context(), "ps", nil, ClientEnv{Home: home}, strings.NewReader(""), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the daemon at http://127.0.0.1:1") {
		t.Errorf("ps against a closed port error = %v; want cannot reach the daemon", err)
	}
}

func regexpMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

func TestParseInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		agent string
		pos   []string
	}{
		{[]string{"s1", "--agent", "x", "hello", "world"}, "x", []string{"s1", "hello", "world"}},
		{[]string{"--agent=x", "s1", "hello"}, "x", []string{"s1", "hello"}},
		{[]string{"s1", "hello", "-agent", "y"}, "y", []string{"s1", "hello"}},
		{[]string{"s1", "--", "--agent", "-v"}, "", []string{"s1", "--agent", "-v"}},
		{[]string{"s1", "--agent", "z", "--", "-x", "--agent", "w"}, "z", []string{"s1", "-x", "--agent", "w"}},
		{nil, "", nil},
	} {
		c := &cli{stdout: io.Discard, stderr: io.Discard}
		fs := c.flagSet("t", "t")
		agent := fs.String("agent", "", "")
		pos, err := c.parse(fs, tc.args, 0, -1)
		if err != nil || *agent != tc.agent || !slices.Equal(pos, tc.pos) {
			t.Errorf("parse(%q) = %q, agent %q, %v; want %q, agent %q", tc.args, pos, *agent, err, tc.pos, tc.agent)
		}
	}
}
