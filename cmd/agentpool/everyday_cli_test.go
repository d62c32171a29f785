package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/httpapi"
)

// runEnv runs a client command against e with env (its Home defaults to
// e's).
func (e *cliEnv) runEnv(t *testing.T, env ClientEnv, stdin string, args ...string) (string, string, error) {
	t.Helper()
	if env.Home == "" {
		env.Home = e.home
	}
	var out, errOut bytes.Buffer
	c := &cli{env: env, stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut}
	handled, err := c.run(t.Context(), args[0], args[1:])
	if !handled {
		t.Fatalf("run(%q) not handled", args)
	}
	return out.String(), errOut.String(), err
}

func TestInvokedAs(t *testing.T) {
	for _, tt := range []struct{ argv0, want string }{
		{"", "agentpool"},
		{"agentpool", "agentpool"},
		{"./bin/agentpool", "./bin/agentpool"},
		{"/home/me/go/bin/agentpool", "/home/me/go/bin/agentpool"},
		{"/tmp/my dir/agentpool", `'/tmp/my dir/agentpool'`},
		{"/tmp/it's/agentpool", `'/tmp/it'\''s/agentpool'`},
	} {
		if got := invokedAs(tt.argv0); got != tt.want {
			t.Errorf("invokedAs(%q) = %q; want %q", tt.argv0, got, tt.want)
		}
	}
}

// Every hint names the command as it was invoked, so that it can be pasted.
func TestHintsUseTheCommandAsInvoked(t *testing.T) {
	e := newCLIEnv(t)
	env := ClientEnv{Self: "./bin/agentpool"}
	out, _, err := e.runEnv(t, env, "", "session", "new", "--repo", "/elsewhere")
	if err != nil || !strings.Contains(out, `Next: ./bin/agentpool prompt s-new "describe what you want"`) {
		t.Errorf("session new = %q, %v; want the next step with ./bin/agentpool", out, err)
	}
	out, _, err = e.runEnv(t, env, "", "session", "--help")
	if err != nil || !strings.HasPrefix(out, "Usage: ./bin/agentpool session <command>") {
		t.Errorf("session --help = %q, %v; want the usage with ./bin/agentpool", out, err)
	}
	out, _, err = e.runEnv(t, env, "", "ps", "--help")
	if err != nil || !strings.HasPrefix(out, "Usage: ./bin/agentpool ps") {
		t.Errorf("ps --help = %q, %v; want the usage with ./bin/agentpool", out, err)
	}
	done := make(chan struct{})
	var pout string
	go func() {
		defer close(done)
		pout, _, _ = e.runEnv(t, env, "", "prompt", "s1", "hello")
	}()
	<-e.pending
	e.answers <- "allow_once"
	<-done
	for _, want := range []string{"waiting for an answer: ./bin/agentpool permissions answer s1 r1", "see the changes: ./bin/agentpool diff s1 --turn 3"} {
		if !strings.Contains(pout, want) {
			t.Errorf("prompt output = %q; want %q in it", pout, want)
		}
	}
	_, _, err = (&cli{env: ClientEnv{Home: t.TempDir(), Self: "./bin/agentpool"}}).runQuiet(t, "ps")
	if err == nil || !strings.Contains(err.Error(), "start one with: ./bin/agentpool serve") {
		t.Errorf("ps without a daemon error = %v; want the hint with ./bin/agentpool", err)
	}
}

// runQuiet runs a command of c with empty stdin and discarded output.
func (c *cli) runQuiet(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	c.stdin, c.stdout, c.stderr = strings.NewReader(""), &out, &errOut
	_, err := c.run(t.Context(), args[0], args[1:])
	return out.String(), errOut.String(), err
}

func TestFindHome(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user := mk("home", "me")
	project := mk("home", "me", "src", "project")
	mk("home", "me", "src", "project", ".agentpool")
	deep := mk("home", "me", "src", "project", "cmd", "tool")
	elsewhere := mk("home", "me", "notes")
	mk("home", ".agentpool") // above $HOME: never found
	outside := mk("srv", "checkout")
	mk("srv", "checkout", ".agentpool")
	fileNotDir := mk("home", "me", "odd")
	if err := os.WriteFile(filepath.Join(fileNotDir, ".agentpool"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		env      map[string]string
		cwd      string
		want     string
		wantFrom string
	}{
		{"AGENTPOOL_HOME wins", map[string]string{"AGENTPOOL_HOME": "/data/ap", "HOME": user}, deep, "/data/ap", homeFromEnv},
		{"in the checkout", map[string]string{"HOME": user}, project, filepath.Join(project, ".agentpool"), homeFromNearest},
		{"in a subdirectory", map[string]string{"HOME": user}, deep, filepath.Join(project, ".agentpool"), homeFromNearest},
		{"outside the home directory", map[string]string{"HOME": user}, filepath.Join(outside), filepath.Join(outside, ".agentpool"), homeFromNearest},
		{"not above $HOME", map[string]string{"HOME": user}, elsewhere, filepath.Join(user, ".local", "state", "agentpool"), homeFromUser},
		{"a file named .agentpool", map[string]string{"HOME": user}, fileNotDir, filepath.Join(user, ".local", "state", "agentpool"), homeFromUser},
		{"XDG_STATE_HOME", map[string]string{"HOME": user, "XDG_STATE_HOME": "/state"}, elsewhere, "/state/agentpool", homeFromUser},
		{"relative XDG_STATE_HOME is ignored", map[string]string{"HOME": user, "XDG_STATE_HOME": "state"}, elsewhere, filepath.Join(user, ".local", "state", "agentpool"), homeFromUser},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home, from := findHome(func(k string) string { return tt.env[k] }, tt.cwd, io.Discard)
			if home != tt.want || from != tt.wantFrom {
				t.Errorf("findHome(%v, %s) = %s, %q; want %s, %q", tt.env, tt.cwd, home, from, tt.want, tt.wantFrom)
			}
		})
	}
}

// AGENTPOOL_ADDR without AGENTPOOL_TOKEN is a 401 that says what to set.
func TestUnauthorizedSaysWhatToSet(t *testing.T) {
	e := newCLIEnv(t)
	_, _, err := e.runEnv(t, ClientEnv{Home: t.TempDir(), Addr: e.ts.Listener.Addr().String()}, "", "ps")
	if !httpapi.IsCode(err, httpapi.CodeUnauthorized) {
		t.Fatalf("ps with AGENTPOOL_ADDR alone error = %v; want unauthorized", err)
	}
	for _, want := range []string{"AGENTPOOL_TOKEN", "AGENTPOOL_ADDR alone is not enough", "no token"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ps with AGENTPOOL_ADDR alone error = %q; want %q in it", err, want)
		}
	}
	// A wrong token is refused at the hello, before it is sent: the
	// program there may be another daemon or one that took the port.
	_, _, err = e.runEnv(t, ClientEnv{Addr: e.ts.Listener.Addr().String(), Token: "wrong"}, "", "ps")
	for _, want := range []string{"does not know the token of $AGENTPOOL_TOKEN, so the token was not sent",
		"another daemon, or a program that took the port", "set AGENTPOOL_TOKEN", "AGENTPOOL_ADDR alone is not enough"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ps with a wrong AGENTPOOL_TOKEN error = %v; want %q in it", err, want)
		}
	}
	if !httpapi.IsCode(err, httpapi.CodeUnauthorized) {
		t.Errorf("ps with a wrong AGENTPOOL_TOKEN error = %v; want unauthorized", err)
	}
}

// providers list says the PATH once, not on every row.
func TestProvidersListSaysPATHOnce(t *testing.T) {
	path := strings.Repeat("/a/long/directory/of/binaries:", 10) + t.TempDir()
	t.Setenv("PATH", path)
	e := newCLIEnv(t)
	out, _, err := e.run(t, t.Context(), false, false, "", "providers", "list")
	if err != nil {
		t.Fatalf("providers list error = %v", err)
	}
	if n := strings.Count(out, path); n != 1 || !strings.Contains(out, "searched PATH: "+path+"\n") {
		t.Errorf("providers list shows the PATH %d times; want once, in a footer:\n%s", n, out)
	}
	if !strings.Contains(out, `command "claude-agent-acp" not found in PATH`) {
		t.Errorf("providers list rows lack the short diagnostic:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 160 && !strings.HasPrefix(line, "searched PATH: ") {
			t.Errorf("providers list has a line of %d characters: %q", len(line), line)
		}
	}
}

// An unknown or disabled agent is refused with its own message, before
// any worktree is made, and a typo in enable/disable is pointed out.
func TestUnknownOrDisabledAgent(t *testing.T) {
	e := newCLIEnv(t)
	_, errOut, err := e.run(t, t.Context(), false, false, "", "session", "new", "--repo", "/elsewhere", "--agent", "gemni")
	if err == nil || !strings.Contains(err.Error(), `unknown provider "gemni", did you mean "gemini"? (known: `) || strings.Contains(errOut, "worktree") {
		t.Errorf("session new --agent gemni = %v, stderr %q; want unknown provider, did you mean gemini, and no worktree", err, errOut)
	}
	_, _, err = e.run(t, t.Context(), false, false, "", "providers", "disable", "gemni")
	if !httpapi.IsCode(err, httpapi.CodeUnknownProvider) || !strings.Contains(err.Error(), `did you mean "gemini"?`) {
		t.Errorf("providers disable gemni error = %v; want 404 unknown_provider, did you mean gemini", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.home, "providers.json")); strings.Contains(string(b), "gemni") {
		t.Errorf("providers disable gemni wrote the typo:\n%s", b)
	}
	if _, _, err := e.run(t, t.Context(), false, false, "", "providers", "disable", "gemini"); err != nil {
		t.Fatalf("providers disable gemini error = %v", err)
	}
	const disabled = `provider "gemini" is disabled (enable with: ./ap providers enable gemini)`
	_, errOut, err = e.runEnv(t, ClientEnv{Self: "./ap"}, "", "session", "new", "--repo", "/elsewhere", "--agent", "gemini")
	if err == nil || err.Error() != disabled || strings.Contains(errOut, "worktree") {
		t.Errorf("session new --agent gemini (disabled) = %v, stderr %q; want %q and no worktree", err, errOut, disabled)
	}
	_, _, err = e.runEnv(t, ClientEnv{Self: "./ap"}, "", "prompt", "s1", "--agent", "gemini", "hello")
	if err == nil || err.Error() != disabled {
		t.Errorf("prompt --agent gemini (disabled) = %v; want %q", err, disabled)
	}
}

// providers.json replaced by a directory: enable/disable fail with a 4xx
// that says why; deleted: the last good config stays, and refresh says so.
func TestProvidersFileTrouble(t *testing.T) {
	e := newCLIEnv(t)
	file := filepath.Join(e.home, "providers.json")
	if _, _, err := e.run(t, t.Context(), false, false, "", "providers", "disable", "gemini"); err != nil {
		t.Fatalf("providers disable gemini error = %v", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := e.run(t, t.Context(), false, false, "", "providers", "refresh")
	if err == nil || !strings.Contains(errOut, file+" is missing: the last good config stays in force") {
		t.Errorf("providers refresh after the file was deleted = %v, stderr %q; want it to say the file is missing", err, errOut)
	}
	out, _, err := e.run(t, t.Context(), false, false, "", "providers", "list")
	if err != nil || !regexpMatch(`(?m)^gemini +acp +no +disabled`, out) || !strings.Contains(out, "is missing") {
		t.Errorf("providers list after the file was deleted = %v:\n%s\nwant gemini still disabled and the diagnostic", err, out)
	}

	if err := os.Mkdir(file, 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.run(t, t.Context(), false, false, "", "providers", "enable", "gemini")
	var ae *httpapi.Error
	if !asAPIError(err, &ae) || ae.Status != 422 || !strings.Contains(ae.Message, "it is a directory, not a file") {
		t.Errorf("providers enable with a directory in place of the file error = %v; want a 422 saying it is a directory", err)
	}
}

// asAPIError is errors.As for *httpapi.Error.
func asAPIError(err error, target **httpapi.Error) bool {
	return errors.As(err, target)
}

// What docs/api.md says of the API: GET /v1/health is open but gives the
// counts only with the token; a body is JSON of at most 1 MiB (415, 413).
func TestAPIAsDocumented(t *testing.T) {
	e := newCLIEnv(t)
	do := func(method, path, ctype, token string, body []byte) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, e.ts.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp, m
	}
	resp, h := do("GET", "/v1/health", "", "", nil)
	_, hasSessions := h["sessions"]
	if resp.StatusCode != 200 || h["status"] != "ok" || h["version"] == nil || hasSessions {
		t.Errorf("GET /v1/health without a token = %d %v; want 200 with status and version, no counts", resp.StatusCode, h)
	}
	resp, h = do("GET", "/v1/health", "", cliTestToken, nil)
	_, hasSessions = h["sessions"]
	_, hasBackends := h["backends"]
	if resp.StatusCode != 200 || !hasSessions || !hasBackends {
		t.Errorf("GET /v1/health with the token = %d %v; want the counts", resp.StatusCode, h)
	}
	resp, body := do("POST", "/v1/sessions", "text/plain", cliTestToken, []byte(`{"repo": "/r", "agent": "demo"}`))
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("POST /v1/sessions as text/plain = %d %v; want 415", resp.StatusCode, body)
	}
	big := append([]byte(`{"repo": "/r", "agent": "demo", "title": "`), bytes.Repeat([]byte("x"), 1<<20)...)
	resp, body = do("POST", "/v1/sessions", "application/json", cliTestToken, append(big, `"}`...))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /v1/sessions of over 1 MiB = %d %v; want 413", resp.StatusCode, body)
	}
	resp, body = do("PATCH", "/v1/providers/gemni", "application/merge-patch+json", cliTestToken, []byte(`{"enabled": false}`))
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(fmt.Sprint(body["error"]), `did you mean "gemini"?`) {
		t.Errorf("PATCH /v1/providers/gemni = %d %v; want 404 unknown provider, did you mean gemini", resp.StatusCode, body)
	}
}
