package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// writeFakeProvider writes providers.json with one provider, "fake": the
// test binary as the scripted ACP agent running s.
func writeFakeProvider(t *testing.T, home string, s agenttest.Script) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw),
		"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
	doc := map[string]any{"version": 1, "providers": map[string]any{
		"fake": map[string]any{"extends": "acp", "command": []string{exe}, "env": env},
	}}
	b, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// newE2ERepo makes a git repository with one commit, in a new directory.
func newE2ERepo(t *testing.T) string {
	t.Helper()
	return e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# r\n"})
}

// e2eRepoAt makes a git repository at dir (created if missing) whose one
// commit, on main, holds files (name → content), and returns dir.
func e2eRepoAt(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e2eGit(t, dir, "init", "-q", "-b", "main")
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e2eGit(t, dir, "add", ".")
	e2eGit(t, dir, "commit", "-q", "-m", "init")
	return dir
}

// seenEvent is what a reader got of one event.
type seenEvent struct {
	Type backends.EventType
	Data string
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// kill9 kills the daemon's process and waits for it.
func (d *daemon) kill9() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
}

// TestKill9KeepsWhatReadersSaw kills the daemon with SIGKILL several times
// while sessions run turns that stream events to SSE readers, then checks
// against the store (read through the API after a restart) that every
// event a reader saw is stored with the same seq, type and data; that the
// turn ids acknowledged by 202s are all stored, each for its own prompt,
// never given twice; and that every turn.started has a turn.ended.
func TestKill9KeepsWhatReadersSaw(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	const (
		rounds   = 6
		sessions = 3
		roundFor = 900 * time.Millisecond
	)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeFakeProvider(t, home, agenttest.Script{Turns: []agenttest.Turn{{
		Echo: true, Steps: []agenttest.Step{{Chunks: 150, ChunksPerSecond: 1500}},
	}}})
	repo := newE2ERepo(t)

	var mu sync.Mutex
	seen := map[string]map[int64]seenEvent{} // session → seq → event
	acked := map[turnKey]bool{}              // turns whose 202 was seen
	conflict := func(format string, args ...any) { t.Errorf(format, args...) }

	var ids []string
	for round := 0; round < rounds; round++ {
		d := startDaemon(t, bin, home)
		ctx, cancel := context.WithCancel(context.Background())
		if round == 0 {
			for range sessions {
				s, err := d.client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: "fake"})
				if err != nil {
					t.Fatalf("create session: %v\n%s", err, d.out)
				}
				ids = append(ids, s.ID)
				seen[s.ID] = map[int64]seenEvent{}
			}
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(2)
			go func() { // an SSE reader from the start of the session
				defer wg.Done()
				_ = d.client.Events(ctx, id, 0, func(ev backends.Event) error {
					got := seenEvent{Type: ev.Type, Data: compactJSON(ev.Data)}
					mu.Lock()
					defer mu.Unlock()
					if prev, ok := seen[id][ev.Seq]; ok && prev != got {
						conflict("round %d: session %s seq %d read as %+v, earlier as %+v", round, id, ev.Seq, got, prev)
					}
					seen[id][ev.Seq] = got
					return nil
				})
			}()
			go func() { // prompts, one after the other
				defer wg.Done()
				for ctx.Err() == nil {
					tn, err := d.client.Prompt(ctx, id, "", fmt.Sprintf("round %d", round), false)
					var ae *httpapi.Error
					switch {
					case err == nil:
						mu.Lock()
						if acked[turnKey{id, tn.ID}] {
							conflict("turn %d of %s acknowledged twice", tn.ID, id)
						}
						acked[turnKey{id, tn.ID}] = true
						mu.Unlock()
					case errors.As(err, &ae) && ae.Status == http.StatusConflict:
					case ctx.Err() != nil:
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		time.Sleep(roundFor)
		d.kill9()
		cancel()
		wg.Wait()
		waitNoProcesses(t, bin, "agents after the daemon was killed")
	}

	d := startDaemon(t, bin, home)
	defer func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	}()
	ctx := context.Background()
	total, turnsSeen := 0, 0
	for _, id := range ids {
		log, err := d.client.EventLog(ctx, id, 0)
		if err != nil {
			t.Fatalf("event log of %s: %v", id, err)
		}
		stored := map[int64]seenEvent{}
		started, ended := map[int64]bool{}, map[int64]int{}
		for _, ev := range log {
			stored[ev.Seq] = seenEvent{Type: ev.Type, Data: compactJSON(ev.Data)}
			switch ev.Type {
			case backends.EventTurnStarted:
				started[ev.Turn] = true
			case backends.EventTurnEnded:
				ended[ev.Turn]++
			}
		}
		for seq, got := range seen[id] {
			total++
			if want, ok := stored[seq]; !ok || want != got {
				t.Errorf("session %s seq %d: a reader saw %+v; the store has %+v (present %v)", id, seq, got, want, ok)
			}
		}
		for turn := range started {
			turnsSeen++
			if ended[turn] != 1 {
				t.Errorf("session %s turn %d: %d turn.ended after recovery; want 1", id, turn, ended[turn])
			}
		}
		turns, err := d.client.Turns(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range turns {
			if tn.EndedAt == nil {
				t.Errorf("session %s turn %d still open after recovery", id, tn.ID)
			}
			delete(acked, turnKey{id, tn.ID})
		}
	}
	for k := range acked {
		t.Errorf("turn %d acknowledged for %s is not stored", k.turn, k.session)
	}
	if total == 0 || turnsSeen < rounds {
		t.Fatalf("readers saw %d events and %d turns; the test did not exercise anything", total, turnsSeen)
	}
	t.Logf("%d rounds: readers saw %d events, %d turns, all stored as seen", rounds, total, turnsSeen)
}

// turnKey names a turn: its session and its number there.
type turnKey struct {
	session string
	turn    int64
}
