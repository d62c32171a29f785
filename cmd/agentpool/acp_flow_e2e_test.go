package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
	acp "github.com/coder/acp-go-sdk"
)

// TestACPEndToEnd drives `agentpool acp` as an editor does, through
// acp-go-sdk's client side: initialize, session/new adopting a spare,
// a prompt with a permission answered by the editor, the Agent option
// switched mid-session, session/list, the acp process killed and a new
// one loading the session (history replayed), a permission answered by
// the API first, a cancel, bad input, and session/close keeping the
// branch.
func TestACPEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# project\n"})
	if err := os.MkdirAll(filepath.Join(repo, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeACPProviders(t, home, bin)
	d := startDaemon(t, bin, home, "AGENTPOOL_WORKTREES="+filepath.Join(t.TempDir(), "trees"),
		"AGENTPOOL_SPARES=alpha=1", "AGENTPOOL_SPARES_REPOS="+repo)
	d.stopAtCleanup()
	ctx := context.Background()

	ed := startEditor(t, bin, home, filepath.Join(repo, "src"), "--agent", "alpha")
	init := ed.initialize()
	caps := init.AgentCapabilities
	if init.AgentInfo == nil || init.AgentInfo.Name != "agentpool" || !caps.LoadSession ||
		caps.SessionCapabilities.List == nil || caps.SessionCapabilities.Resume == nil || caps.SessionCapabilities.Close == nil {
		t.Fatalf("initialize = %+v; want agentpool with load, list, resume and close", init)
	}

	spare := d.waitSpares("ready", readySpares(1, ""))[0]
	newRes, err := ed.conn.NewSession(ed.ctx(), acp.NewSessionRequest{Cwd: filepath.Join(repo, "src"), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	id := newRes.SessionId
	if string(id) != spare.ID {
		t.Errorf("session/new = %s; want the spare %s adopted", id, spare.ID)
	}
	ps, err := d.client.Session(ctx, string(id))
	if err != nil || !sameDir(ps.Repo, repo) {
		t.Fatalf("pool session %s = %+v, %v; want one of %s", id, ps, err, repo)
	}
	agentOpt := optionOf(newRes.ConfigOptions, "agent")
	if agentOpt == nil || agentOpt.CurrentValue != "alpha" || !slices.Equal(choices(agentOpt), []string{"alpha", "beta", "demo"}) {
		t.Errorf("Agent option = %+v %v; want alpha of [alpha beta demo] (gamma is disabled)", agentOpt, choices(agentOpt))
	}
	if m := optionOf(newRes.ConfigOptions, "model"); m == nil || m.CurrentValue != "fast" {
		t.Errorf("model option = %+v; want alpha's own, fast", m)
	}
	if newRes.Modes == nil || len(newRes.Modes.AvailableModes) != 2 {
		t.Errorf("modes = %+v; want alpha's two", newRes.Modes)
	}
	ed.waitUpdate(id, 0, "available commands with the pool's and the agent's", func(u acp.SessionUpdate) bool {
		if u.AvailableCommandsUpdate == nil {
			return false
		}
		var names []string
		for _, c := range u.AvailableCommandsUpdate.AvailableCommands {
			names = append(names, c.Name)
		}
		return slices.Contains(names, "diff") && slices.Contains(names, "help")
	})

	// The agent's own option passes through, and its change comes back.
	n0 := ed.count()
	setModel, err := ed.conn.SetSessionConfigOption(ed.ctx(), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: id, ConfigId: "model", Value: "smart"}})
	if m := optionOf(setModel.ConfigOptions, "model"); err != nil || m == nil || m.CurrentValue != "smart" {
		t.Errorf("setting model = %+v, %v; want smart", m, err)
	}
	ed.waitUpdate(id, n0, "config_option_update with model smart", func(u acp.SessionUpdate) bool {
		if u.ConfigOptionUpdate == nil {
			return false
		}
		m := optionOf(u.ConfigOptionUpdate.ConfigOptions, "model")
		return m != nil && m.CurrentValue == "smart" && optionOf(u.ConfigOptionUpdate.ConfigOptions, "agent") != nil
	})

	// A prompt: streamed, the permission answered by the editor.
	n := ed.count()
	res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("first task")}})
	if err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v; want end_turn", res, err)
	}
	got := ed.since(id, n)
	if text := agentText(got); !strings.Contains(text, "(thinking)alpha looks. permission: allow_oncealpha wrote notes.txt.") {
		t.Errorf("streamed text %q; want the thought and both chunks", text)
	}
	if !slices.ContainsFunc(got, func(u acp.SessionUpdate) bool {
		return u.ToolCall != nil && u.ToolCall.ToolCallId == "read-1" && len(u.ToolCall.Locations) == 1
	}) {
		t.Errorf("no tool_call read-1 with its location in %s", describeUpdates(got))
	}
	if b, err := os.ReadFile(filepath.Join(ps.Worktree.Path, "notes.txt")); err != nil || string(b) != "first task\n" {
		t.Errorf("notes.txt in the worktree = %q, %v; want the prompt (permission allowed)", b, err)
	}
	// The page and the CLI see the editor's answer: nothing pending, the
	// request resolved.
	if pend, err := d.client.Permissions(ctx, string(id)); err != nil || len(pend) != 0 {
		t.Errorf("pending permissions after the editor answered = %+v, %v; want none", pend, err)
	}
	if evs, err := d.client.EventLog(ctx, string(id), 0); err != nil || !slices.ContainsFunc(evs, func(ev backends.Event) bool {
		return ev.Type == backends.EventPermissionResolved && strings.Contains(string(ev.Data), "allow")
	}) {
		t.Errorf("no permission.resolved event for the editor's answer (%v)", err)
	}

	// The Agent option: a disabled provider is refused, beta is taken.
	if _, err := ed.conn.SetSessionConfigOption(ed.ctx(), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: id, ConfigId: "agent", Value: "gamma"}}); !strings.Contains(acpMessage(err), "disabled") {
		t.Errorf("choosing gamma: %v; want an error saying it is disabled", err)
	}
	set, err := ed.conn.SetSessionConfigOption(ed.ctx(), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: id, ConfigId: "agent", Value: "beta"}})
	if err != nil || optionOf(set.ConfigOptions, "agent").CurrentValue != "beta" {
		t.Fatalf("choosing beta = %+v, %v", set, err)
	}
	n = ed.count()
	if res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("hello")}}); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt to beta = %+v, %v", res, err)
	}
	if text := agentText(ed.since(id, n)); text != "beta says hello" {
		t.Errorf("beta's turn streamed %q; want %q", text, "beta says hello")
	}
	if st, _ := d.client.Pool(ctx); !slices.ContainsFunc(st.Backends, func(b pool.AgentStatus) bool { return b.Session == string(id) && b.Agent == "alpha" }) {
		t.Errorf("alpha is no longer warm in session %s after the switch: %+v", id, st.Backends)
	}

	// session/list shows the session under the repository.
	list, err := ed.conn.ListSessions(ed.ctx(), acp.ListSessionsRequest{Cwd: acp.Ptr(repo)})
	if err != nil || !slices.ContainsFunc(list.Sessions, func(s acp.SessionInfo) bool { return s.SessionId == id && sameDir(s.Cwd, repo) }) {
		t.Fatalf("session/list = %+v, %v; want %s in %s", list, err, id, repo)
	}
	for _, s := range list.Sessions {
		// The session has no title of its own: its first prompt is.
		if s.SessionId == id && (s.Title == nil || *s.Title != "first task" || s.UpdatedAt == nil) {
			t.Errorf("session/list entry %+v; want the title \"first task\" (its first prompt) and the updated time", s)
		}
	}

	// The acp process is killed: the session and its agents live on; a
	// new one loads it, replaying its history.
	pids := agentPIDs(t, d, string(id))
	ed.kill9()
	ed = startEditor(t, bin, home, repo, "--agent", "alpha")
	ed.initialize()
	load, err := ed.conn.LoadSession(ed.ctx(), acp.LoadSessionRequest{SessionId: id, Cwd: repo, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/load: %v", err)
	}
	if after := agentPIDs(t, d, string(id)); !maps.Equal(after, pids) || len(pids) != 2 {
		t.Errorf("agents of the session %v before the acp process was killed, %v after; want both still running", pids, after)
	}
	if o := optionOf(load.ConfigOptions, "agent"); o == nil || o.CurrentValue != "beta" {
		t.Errorf("Agent after load = %+v; want beta, the session's agent", o)
	}
	replayed := agentText(ed.since(id, 0))
	if want := "[user: first task](thinking)alpha looks. permission: allow_oncealpha wrote notes.txt.[user: hello]beta says hello"; !strings.Contains(replayed, want) {
		t.Errorf("replayed %q; want %q", replayed, want)
	}

	// Back to alpha; the API answers the permission before the editor.
	if _, err := ed.conn.SetSessionConfigOption(ed.ctx(), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: id, ConfigId: "agent", Value: "alpha"}}); err != nil {
		t.Fatal(err)
	}
	ed.mu.Lock()
	ed.answer = ""
	ed.mu.Unlock()
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			ed.mu.Lock()
			asked := ed.asked
			ed.mu.Unlock()
			if asked > 0 {
				if pend, err := d.client.Permissions(ctx, string(id)); err == nil && len(pend) == 1 {
					_ = d.client.Answer(ctx, string(id), pend[0].ID, "allow_once")
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	n = ed.count()
	if res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("third")}}); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt answered from the API = %+v, %v", res, err)
	}
	if text := agentText(ed.since(id, n)); !strings.Contains(text, "alpha wrote notes.txt.") {
		t.Errorf("turn answered from the API streamed %q", text)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ed.mu.Lock()
		w := ed.withdrawn
		ed.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the editor's permission request was not withdrawn after the API answered it")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A prompt while one runs is refused; session/cancel ends the turn.
	if _, err := ed.conn.SetSessionConfigOption(ed.ctx(), acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
		SessionId: id, ConfigId: "agent", Value: "beta"}}); err != nil {
		t.Fatal(err)
	}
	n = ed.count()
	type result struct {
		res acp.PromptResponse
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("long")}})
		first <- result{r, err}
	}()
	ed.waitUpdate(id, n, "beta's chunk", func(u acp.SessionUpdate) bool {
		return u.AgentMessageChunk != nil && strings.Contains(u.AgentMessageChunk.Content.Text.Text, "beta works on long")
	})
	if _, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("again")}}); !strings.Contains(acpMessage(err), "already running") {
		t.Errorf("a prompt while one runs: %v; want an error saying one runs", err)
	}
	if err := ed.conn.Cancel(ed.ctx(), acp.CancelNotification{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-first:
		if r.err != nil || r.res.StopReason != acp.StopReasonCancelled {
			t.Errorf("cancelled prompt = %+v, %v; want cancelled", r.res, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled prompt did not end")
	}

	// Bad input.
	before, _ := d.client.Sessions(ctx)
	if _, err := ed.conn.NewSession(ed.ctx(), acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}); !strings.Contains(acpMessage(err), "not inside a git repository") {
		t.Errorf("session/new outside a repository: %v; want an error saying so", err)
	}
	if after, _ := d.client.Sessions(ctx); len(after) != len(before) {
		t.Errorf("sessions %d → %d after a refused session/new; want nothing created", len(before), len(after))
	}
	if _, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: "nope", Prompt: []acp.ContentBlock{acp.TextBlock("x")}}); !strings.Contains(acpMessage(err), "not open") {
		t.Errorf("prompt to an unknown session: %v", err)
	}
	if _, err := ed.conn.LoadSession(ed.ctx(), acp.LoadSessionRequest{SessionId: "nope", Cwd: repo, McpServers: []acp.McpServer{}}); err == nil {
		t.Errorf("session/load of an unknown session: no error")
	} else if msg := acpMessage(err); !strings.Contains(msg, "session/list") {
		t.Errorf("session/load of an unknown session: %q; want a hint to session/list", msg)
	}

	// The pool's own /diff answers in the thread.
	n = ed.count()
	if res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("/diff --stat")}}); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("/diff = %+v, %v", res, err)
	}
	if text := agentText(ed.since(id, n)); !strings.Contains(text, "notes.txt") {
		t.Errorf("/diff --stat answered %q; want notes.txt named", text)
	}

	// /restore puts the worktree back before turn 3 (alpha's "third").
	n = ed.count()
	if res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("/restore")}}); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("/restore = %+v, %v", res, err)
	} else if text := agentText(ed.since(id, n)); !strings.Contains(text, "/restore failed") || !strings.Contains(text, "--turn") {
		t.Errorf("/restore without --turn answered %q; want the failure naming --turn", text)
	}
	n = ed.count()
	if res, err := ed.conn.Prompt(ed.ctx(), acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("/restore --turn 3")}}); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("/restore --turn 3 = %+v, %v", res, err)
	}
	if b, err := os.ReadFile(filepath.Join(ps.Worktree.Path, "notes.txt")); err != nil || string(b) != "first task\n" {
		t.Errorf("notes.txt after /restore --turn 3 = %q, %v (the thread said %q); want the state before turn 3", b, err, agentText(ed.since(id, n)))
	}

	// session/close closes the pool session and keeps its branch.
	if _, err := ed.conn.CloseSession(ed.ctx(), acp.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatalf("session/close: %v", err)
	}
	if ps2, err := d.client.Session(ctx, string(id)); err != nil || ps2.Status != pool.StatusClosed {
		t.Errorf("session after close = %+v, %v; want closed", ps2.Status, err)
	}
	if out := e2eGit(t, repo, "branch", "--list", ps.Worktree.Branch); !strings.Contains(out, ps.Worktree.Branch) {
		t.Errorf("branch %s gone after session/close", ps.Worktree.Branch)
	}
	if b := e2eGit(t, repo, "show", ps.Worktree.Branch+":notes.txt"); !strings.Contains(b, "first task") {
		t.Errorf("notes.txt on the branch = %q; want the work kept (as restored)", b)
	}
	ed.stop()
}

// agentPIDs returns the pids of the session's running agents by agent.
func agentPIDs(t *testing.T, d *daemon, session string) map[string]int {
	t.Helper()
	st, err := d.client.Pool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, b := range st.Backends {
		if b.Session == session && b.PID != 0 {
			out[b.Agent] = b.PID
		}
	}
	return out
}

// TestACPNoDaemon: with no daemon, initialize fails saying how to start
// one, and nothing is created in the editor's folder or the data
// directory's place.
func TestACPNoDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := agentpoolBinary(t)
	home := filepath.Join(t.TempDir(), "nohome")
	project := t.TempDir()
	ed := startEditor(t, bin, home, project)
	_, err := ed.conn.Initialize(ed.ctx(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if msg := acpMessage(err); !strings.Contains(msg, "serve") {
		t.Errorf("initialize without a daemon: %v; want how to start one", err)
	}
	ed.stop()
	if entries, _ := os.ReadDir(project); len(entries) != 0 {
		t.Errorf("the editor's folder holds %d entries; want none", len(entries))
	}
	if _, err := os.Stat(home); err == nil {
		t.Errorf("agentpool acp created the data directory %s", home)
	}

	// As an editor starts it: no AGENTPOOL_HOME, in the project's
	// repository. The discovery is the CLI's; it creates nothing, neither
	// a .agentpool in the project nor the per-user data directory.
	user := t.TempDir()
	state := filepath.Join(user, ".local", "state")
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "proj"), map[string]string{"README.md": "# proj\n"})
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTPOOL_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") {
			env = append(env, kv)
		}
	}
	ed = startACPPeerEnv(t, bin, append(env, "HOME="+user), repo, "acp")
	_, err = ed.conn.Initialize(ed.ctx(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if msg := acpMessage(err); !strings.Contains(msg, "no daemon found in "+filepath.Join(state, "agentpool")) || !strings.Contains(msg, "agentpool serve") {
		t.Errorf("initialize without a daemon or AGENTPOOL_HOME: %v; want the per-user data directory named and how to start the daemon", err)
	}
	ed.stop()
	if out := e2eGit(t, repo, "status", "--porcelain", "--ignored"); out != "" {
		t.Errorf("the editor's repository after agentpool acp ran in it:\n%s\nwant it untouched", out)
	}
	if ents, _ := os.ReadDir(user); len(ents) != 0 {
		t.Errorf("agentpool acp created %d entries in the user's home directory; want none", len(ents))
	}
}
