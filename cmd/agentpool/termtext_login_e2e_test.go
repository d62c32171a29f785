package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyRun is a command of the built binary run on a terminal of its own,
// its output gathered as it comes.
type ptyRun struct {
	t    *testing.T
	cmd  *exec.Cmd
	tty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// startOnPTY runs bin with args on a new terminal, with AGENTPOOL_HOME home.
func startOnPTY(t *testing.T, bin, home string, args ...string) *ptyRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	r := &ptyRun{t: t, cmd: cmd, tty: tty, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			r.mu.Unlock()
			if err != nil {
				return // EIO once the command ended
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = tty.Close()
		<-r.done
		_ = cmd.Wait()
	})
	return r
}

// output is what the command printed so far.
func (r *ptyRun) output() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.out.Bytes())
}

// waitFor waits until the command printed want, and fails the test after
// 30 s.
func (r *ptyRun) waitFor(want string) {
	r.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !bytes.Contains(r.output(), []byte(want)); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("the command never printed %q; it printed:\n%q", want, r.output())
		}
	}
}

// answer types line on the terminal.
func (r *ptyRun) answer(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.tty, line+"\r"); err != nil {
		r.t.Fatal(err)
	}
}

// wait waits for the command to end and returns its output.
func (r *ptyRun) wait() []byte {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		r.t.Fatalf("the command did not end; it printed:\n%q", r.output())
	}
	_ = r.cmd.Wait()
	return r.output()
}

// agentControls finds what of an agent's sequences reached a terminal
// raw: an ESC that begins anything but the CLI's own colours (SGR with
// no parameter but a colour or a reset), BEL, a carriage return not
// before a newline, a C1 control in UTF-8, or a bidirectional override.
var agentControls = regexp.MustCompile(`\x1b(?:[^\[]|\[(?:[^0-9m]|(?:[0-9]{1,2})?[^0-9m;]|8m))|\x07|\r[^\n]|[\x{80}-\x{9f}\x{202a}-\x{202e}\x{2066}-\x{2069}]`)

// TestLoginAndPermissionOnTerminalShowAgentTextEscaped: on a real
// terminal, the ways to log in an agent offers (their names, a terminal
// method's command and environment) and its permission question (title
// and options) show the agent's control sequences and bidirectional
// overrides escaped, before the user is asked anything; what the user
// declines does not run.
func TestLoginAndPermissionOnTerminalShowAgentTextEscaped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	evil := seqClipboard + seqTitle + seqHidden + "hidden" + seqOverwrite + "\u202eRLO\u202c" + "\u009d0;c1\u009c"
	methods, _ := json.Marshal([]map[string]any{
		{"id": "term", "name": "Terminal" + evil, "description": "desc" + evil, "type": "terminal",
			"args": []string{"\x1b[8m; touch " + marker + "\x1b[0m"}, "env": map[string]string{"FAKE_LOGIN": "1" + seqHidden}},
		{"id": "key", "name": "Key" + evil, "type": "env_var", "vars": []map[string]string{{"name": "FAKE_KEY" + seqHidden}}},
	})
	script := map[string]any{"agent_name": "sly", "auth_methods": json.RawMessage(methods), "turns": []any{map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{
			"tool_call": map[string]any{"id": "p1", "title": "Run ls" + evil, "kind": "execute"},
			"options": []map[string]string{{"optionId": "allow", "name": "Yes" + evil, "kind": "allow_once"},
				{"optionId": "reject", "name": "No" + evil, "kind": "reject_once"}},
			"allowed":  []any{map[string]any{"chunk": "ALLOWED"}},
			"rejected": []any{map[string]any{"chunk": "REJECTED"}},
		}},
	}}}}
	writeScripted(t, home, bin, map[string]any{"sly": script})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# sly\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()

	check := func(what string, out []byte, wants ...string) {
		t.Helper()
		if m := agentControls.FindIndex(out); m != nil {
			t.Errorf("%s on a terminal let the agent's control sequence %q through:\n%q", what, out[m[0]:min(m[1]+16, len(out))], out)
		}
		for _, want := range wants {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("%s on a terminal lacks %q:\n%s", what, want, out)
			}
		}
	}

	login := startOnPTY(t, bin, home, "login", "sly")
	login.waitFor("Which one?")
	login.answer("1")
	login.waitFor("Run it? [y/N]")
	login.answer("n")
	out := login.wait()
	check("login", out, "Terminal^[]52;c;", "desc^[]52;c;", `\u202eRLO\u202c`, "'^[[8m; touch "+marker+"^[[0m'", "FAKE_LOGIN='1^[[8m'")
	if _, err := os.Stat(marker); err == nil {
		t.Error("the login command ran though the user said no")
	}

	if out, err := d.cli("session", "new", "--repo", repo, "--agent", "sly", "--id", "s-sly"); err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	prompt := startOnPTY(t, bin, home, "prompt", "s-sly", "go")
	prompt.waitFor("[N]")
	prompt.answer("n")
	out = prompt.wait()
	check("prompt", out, "Run ls^[]52;c;", "Yes^[]52;c;", "No^[]52;c;", `\u202eRLO\u202c`, "REJECTED")
	if bytes.Contains(out, []byte("ALLOWED")) {
		t.Errorf("the permission was allowed though the user said no:\n%s", out)
	}
}

// TestAttachOnTerminalDropsClipboardAndTitle: a terminal agent's screen
// reaches the user's terminal through agentpool attach with its colours,
// but without its clipboard writes and title changes, however begun (ESC,
// the C1 control U+009D, the 8-bit byte 0x9d) or wrapped (tmux's
// passthrough); Ctrl-] detaches.
func TestAttachOnTerminalDropsClipboardAndTitle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	prog := filepath.Join(t.TempDir(), "sly-tty")
	// Each line typed is answered with the sequences between the letters
	// A to F, a colour, and the line.
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nprintf 'ready\\r\\n> '\nwhile IFS= read -r line; do\n"+
		`  printf 'A\033]52;c;Y3VybCBldmlsfHNo\007B\033]0;pwned\033\\C\302\2350;t\007D\2352;x\007E\033Ptmux;\033\033]52;c;eA==\007\033\\F \033[31mred\033[0m got %s\r\n> ' "$line"`+
		"\ndone\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]any{"version": 1, "providers": map[string]any{
		"tty": map[string]any{"extends": "pty", "command": []string{prog}, "ready_pattern": "^> ", "quiet_window": "300ms"}}})
	if err := os.WriteFile(filepath.Join(home, providersFile), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# tty\n"})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	if out, err := d.cli("session", "new", "--repo", repo, "--agent", "tty", "--id", "s-tty"); err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	if out, err := d.cli("prompt", "s-tty", "first"); err != nil {
		t.Fatalf("prompt: %v\n%s", err, out)
	}
	at := startOnPTY(t, bin, home, "attach", "s-tty")
	at.waitFor("got first")
	at.answer("second")
	at.waitFor("got second")
	if _, err := at.tty.Write([]byte{0x1d}); err != nil { // Ctrl-]
		t.Fatal(err)
	}
	out := at.wait()
	for _, bad := range []string{"\x1b]52", "\x1b]0;", "\u009d", "\x9d", "\x1bPtmux", "pwned", "Y3VybCBldmlsfHNo"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("attach let %q through:\n%q", bad, out)
		}
	}
	if !bytes.Contains(out, []byte("ABCDEF \x1b[31mred\x1b[0m got second")) {
		t.Errorf("attach did not pass the agent's text and colours as they came:\n%q", out)
	}
}
