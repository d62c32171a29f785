package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentpool/agentpool/attempts"
	"github.com/creack/pty"
)

// TestMCPServerAttemptsPermissions: attempts whose agents ask a
// permission show the requests where they are watched. get_attempts with
// wait_seconds returns as soon as one is asked (not at the end of its
// wait, with "running"), listing per attempt the request, its choices and
// how to answer it; the API's set carries them; once answered with
// answer_permission the attempts end.
func TestMCPServerAttemptsPermissions(t *testing.T) {
	_, _, _, d, c := startMCPRig(t)

	text, sc := c.call("start_attempts", map[string]any{"prompt": "one task", "agent": "scripted", "n": 2}, nil, false)
	id, _ := sc["id"].(string)
	if !strings.HasPrefix(id, "att-") || !strings.Contains(text, "answer_permission") {
		t.Fatalf("start_attempts = %q, %v; want a set, and the next step naming answer_permission", text, sc)
	}
	// Each call returns when a request is asked; both attempts ask one.
	asked := map[string]string{} // session → request
	deadline := time.Now().Add(time.Minute)
	for len(asked) < 2 && time.Now().Before(deadline) {
		text, sc = c.call("get_attempts", map[string]any{"id": id, "wait_seconds": 50}, nil, false)
		if sc["state"] != "running" {
			t.Fatalf("get_attempts = %q, %v; want the set running, blocked on the permission requests", text, sc)
		}
		for _, a := range sc["attempts"].([]any) {
			a := a.(map[string]any)
			perms, _ := a["permissions"].([]any)
			if len(perms) == 0 {
				continue
			}
			session, _ := a["session"].(string)
			p := perms[0].(map[string]any)
			asked[session], _ = p["id"].(string)
			if p["title"] != "Write notes.txt" || !strings.Contains(text, "request "+asked[session]) ||
				!strings.Contains(text, "choices: allow_once") || !regexp.MustCompile(`unanswered, it is rejected at [0-9:]+ UTC, in \d`).MatchString(text) {
				t.Errorf("get_attempts = %q, %v; want the request of %s, its choices and its deadline", text, sc, session)
			}
		}
	}
	if len(asked) != 2 {
		t.Fatalf("get_attempts = %q, %v; want both attempts' permission requests", text, sc)
	}
	if !strings.Contains(text, "answer_permission with the attempt's session, the request id and a choice") {
		t.Errorf("get_attempts = %q; want how to answer", text)
	}
	set, err := d.client.GetAttempts(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range set.Attempts {
		if len(a.PendingPermissions) != 1 || a.PendingPermissions[0].ID != asked[a.Session] || len(a.PendingPermissions[0].Request.Options) == 0 {
			t.Errorf("GET /v1/attempts/%s: attempt %s pending_permissions = %+v; want request %s with its options", id, a.Session, a.PendingPermissions, asked[a.Session])
		}
	}
	for session, req := range asked {
		c.call("answer_permission", map[string]any{"session": session, "request": req, "choice": "allow_once"}, nil, false)
	}
	for sc["state"] == "running" && time.Now().Before(deadline) {
		text, sc = c.call("get_attempts", map[string]any{"id": id, "wait_seconds": 50}, nil, false)
	}
	if sc["state"] != "done" || strings.Contains(text, "waits for an answer") || strings.Count(text, "1 file changed +1") != 2 {
		t.Fatalf("get_attempts after the answers = %q, %v; want both done, each having written notes.txt", text, sc)
	}
}

// TestAttemptWaitShowsPermissions: `attempt --wait` shows the permission
// request an attempt waits for: without a terminal, with the command that
// answers it (and goes on once it is answered); on a terminal, it asks
// the question prompt asks, and sends the answer typed.
func TestAttemptWaitShowsPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n"})
	writeScripted(t, home, bin, map[string]any{"scripted": mcpScript()})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()

	t.Run("pipe", func(t *testing.T) {
		cmd := exec.Command(bin, "attempt", "piped task", "--agent", "scripted", "--repo", repo, "--wait")
		cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		answerRE := regexp.MustCompile(`permissions answer (\S+) (\S+) allow_once\|allow_always\|reject_once`)
		var out strings.Builder
		sc := bufio.NewScanner(stdout)
		answered := false
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if m := answerRE.FindStringSubmatch(line); m != nil && !answered {
				answered = true
				if err := d.client.Answer(t.Context(), m[1], m[2], "allow_once"); err != nil {
					t.Fatalf("answer %s of %s: %v", m[2], m[1], err)
				}
			}
		}
		err = cmd.Wait()
		if err != nil || !answered {
			t.Fatalf("attempt --wait: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
		}
		for _, want := range []string{"waits for a permission answer", "? permission asked: Write notes.txt", "unanswered, it is rejected in "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("attempt --wait printed:\n%s\nwant %q", out.String(), want)
			}
		}
		if !regexp.MustCompile(`(?m)^s-\S+\s+scripted\s+done\s+end_turn`).MatchString(out.String()) {
			t.Errorf("attempt --wait printed:\n%s\nwant the attempt done", out.String())
		}
	})

	t.Run("terminal", func(t *testing.T) {
		cmd := exec.Command(bin, "attempt", "asked task", "--agent", "scripted", "--repo", repo, "--wait", "--json")
		cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
		tty, err := pty.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		defer tty.Close()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		var mu sync.Mutex
		var got bytes.Buffer
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 4096)
			for {
				n, err := tty.Read(buf)
				mu.Lock()
				got.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return // EIO once the command ended
				}
			}
		})
		seen := func() string { mu.Lock(); defer mu.Unlock(); return got.String() }
		waitFor(t, "the permission question", func() bool { return strings.Contains(seen(), "Allow once [y]") })
		if _, err := io.WriteString(tty, "y\n"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("attempt --wait on a terminal did not end after the answer:\n%s", seen())
		}
		wg.Wait()
		if err != nil {
			t.Fatalf("attempt --wait on a terminal: %v\n%s", err, seen())
		}
		out := seen()
		i := strings.LastIndex(out, "\n{")
		var set attempts.Set
		if i < 0 || jsonDecode(out[i+1:], &set) != nil || set.State != attempts.SetDone || len(set.Attempts) != 1 {
			t.Fatalf("attempt --wait --json on a terminal printed:\n%s\nwant the set done as JSON at its end", out)
		}
		sess, err := d.client.Session(t.Context(), set.Attempts[0].Session)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(sess.Worktree.Path, "notes.txt")); string(got) != "asked task\n" {
			t.Errorf("the attempt's notes.txt = %q, %v; want it written once allowed", got, err)
		}
	})

	// Ctrl-C at the question ends the wait at once, with a failure
	// status and no error of a cut request: the attempt runs on, its
	// request still waiting, and the command says how to come back.
	t.Run("ctrl-c", func(t *testing.T) {
		cmd := exec.Command(bin, "attempt", "left task", "--agent", "scripted", "--repo", repo, "--wait")
		cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home)
		out := ctrlCAtQuestion(t, cmd, "attempt --wait") // permctrlc_e2e_test.go
		m := regexp.MustCompile(`interrupted: the attempts of (att-\S+) run on without you; come back to them with: \S+ attempt show (att-\S+) --wait`).FindStringSubmatch(out.String())
		if m == nil || m[1] != m[2] || strings.Contains(out.String(), "interrupt signal received") || strings.Contains(out.String(), "GET /v1/") {
			t.Fatalf("attempt --wait after Ctrl-C printed:\n%s\nwant that the attempts run on and how to come back, no cut request", out)
		}
		set, err := d.client.GetAttempts(t.Context(), m[1], 0)
		if err != nil || set.State != attempts.SetRunning || len(set.Attempts) != 1 || len(set.Attempts[0].PendingPermissions) != 1 {
			t.Fatalf("attempts %s after Ctrl-C = %+v, %v; want it running, its request waiting", m[1], set, err)
		}
		if err := d.client.Answer(t.Context(), set.Attempts[0].Session, set.Attempts[0].PendingPermissions[0].ID, "reject_once"); err != nil {
			t.Fatal(err)
		}
	})
}

// jsonDecode decodes s (a tty's output, with CRLF line ends) into v.
func jsonDecode(s string, v any) error {
	return json.Unmarshal([]byte(strings.ReplaceAll(s, "\r\n", "\n")), v)
}
