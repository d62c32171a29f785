package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/attempts"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// writerScript is a fake agent's script that writes files in one turn.
func writerScript(name string, files map[string]string) map[string]any {
	var steps []any
	for p, c := range files {
		steps = append(steps, map[string]any{"sys": map[string]any{"op": "write", "path": p, "content": c}})
	}
	steps = append(steps, map[string]any{"chunk": "Done.\n"})
	return map[string]any{"agent_name": name, "turns": []any{map[string]any{"steps": steps}}}
}

// withUsage makes script's first turn answer with usage (raw ACP).
func withUsage(script map[string]any, usage string) map[string]any {
	script["turns"].([]any)[0].(map[string]any)["usage"] = json.RawMessage(usage)
	return script
}

// waitSet waits until the attempt set id is no longer running.
func waitSet(t *testing.T, d *daemon, id string) attempts.Set {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		set, err := d.client.GetAttempts(context.Background(), id, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if set.State != attempts.SetRunning {
			return set
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt set still running: %+v", set)
		}
	}
}

// branchExists reports whether repo has the local branch b.
func branchExists(repo, b string) bool {
	return exec.Command("git", "-C", repo, "show-ref", "--verify", "--quiet", "refs/heads/"+b).Run() == nil
}

// TestEndToEndAttempts runs one prompt with three providers on one base
// commit, one of whose check fails; compares them; picks one, which is
// merged while the others are closed keeping their branches; a second set
// is picked with discard, deleting the others' branches; bad requests are
// refused naming the field; the sets survive a restart.
func TestEndToEndAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{
		"alpha": withUsage(writerScript("alpha", map[string]string{"alpha.txt": "one\ntwo\n"}), `{"inputTokens": 120, "outputTokens": 30, "totalTokens": 150}`),
		"beta":  writerScript("beta", map[string]string{"beta.txt": "one\n", "beta2.txt": "x\ny\nz\n"}),
		"gamma": writerScript("gamma", map[string]string{"BROKEN": "the check fails\n"}),
	})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# attempts\n"})
	base := strings.TrimSpace(e2eGit(t, repo, "rev-parse", "HEAD"))
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	ctx := context.Background()

	// Bad requests name their field.
	for _, c := range []struct {
		req   attempts.Request
		field string
	}{
		{attempts.Request{Prompt: "p", Repo: repo}, "agents"},
		{attempts.Request{Prompt: "p", Repo: repo, Agents: []string{"alpha", "nosuch"}}, "agents"},
		{attempts.Request{Prompt: "p", Repo: repo, Agent: "alpha", N: 11}, "n"},
		{attempts.Request{Prompt: "p", Repo: repo, Agent: "alpha", N: -1}, "n"},
		{attempts.Request{Prompt: "", Repo: repo, Agent: "alpha"}, "prompt"},
		{attempts.Request{Prompt: "p", Repo: repo, Agent: "alpha", Base: "no-such-branch"}, "base"},
	} {
		_, err := d.client.StartAttempts(ctx, c.req)
		var ae *httpapi.Error
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Field != c.field {
			t.Errorf("StartAttempts(%+v) = %v; want 400 naming %q", c.req, err, c.field)
		}
	}

	set, err := d.client.StartAttempts(ctx, attempts.Request{Prompt: "do the work", Repo: repo,
		Agents: []string{"alpha", "beta", "gamma"}, Check: "test ! -e BROKEN && echo all good"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(set.ID, "att-") || set.BaseCommit != base || len(set.Attempts) != 3 {
		t.Fatalf("started set = %+v; want 3 attempts on %s", set, base)
	}
	set = waitSet(t, d, set.ID)
	byAgent := map[string]attempts.Attempt{}
	for _, a := range set.Attempts {
		byAgent[a.Agent] = a
		s, err := d.client.Session(ctx, a.Session)
		if err != nil {
			t.Fatal(err)
		}
		if s.Worktree.BaseCommit != base {
			t.Errorf("session %s starts from %s; want %s", a.Session, s.Worktree.BaseCommit, base)
		}
	}
	type want struct {
		files, added int
		check        string
		exit         int
	}
	for agent, w := range map[string]want{"alpha": {1, 2, attempts.CheckPassed, 0}, "beta": {2, 4, attempts.CheckPassed, 0}, "gamma": {1, 1, attempts.CheckFailed, 1}} {
		a := byAgent[agent]
		if a.State != attempts.AttemptDone || a.FilesChanged != w.files || a.LinesAdded != w.added || a.LinesRemoved != 0 ||
			a.Check == nil || a.Check.State != w.check || a.Check.ExitCode != w.exit || a.StopReason == "" || a.Turn != 1 {
			t.Errorf("attempt of %s = %+v check %+v; want done, %d files +%d, check %s exit %d", agent, a, a.Check, w.files, w.added, w.check, w.exit)
		}
	}
	t.Logf("alpha's check: %+v", byAgent["alpha"].Check)
	var u pool.Tokens
	if err := json.Unmarshal(byAgent["alpha"].Usage, &u); err != nil || u.Total != 150 || u.Input != 120 {
		t.Errorf("alpha's usage = %s (%v); want its turn's 150 tokens (120 in)", byAgent["alpha"].Usage, err)
	}
	if b := byAgent["beta"].Usage; len(b) != 0 && string(b) != "null" {
		t.Errorf("beta's usage = %s; want null (its agent reported none)", b)
	}
	if c := byAgent["gamma"].Check; c == nil || c.Confined == "" {
		t.Errorf("gamma's check does not say how it was confined: %+v", c)
	}
	if c := byAgent["alpha"].Check; c == nil || !strings.Contains(c.Output, "all good") {
		t.Errorf("alpha's check output = %+v", c)
	}

	// Picking a session not of the set is refused; picking alpha merges it.
	if _, err := d.client.PickAttempt(ctx, set.ID, attempts.PickRequest{Session: "nosuch"}); !httpapi.IsCode(err, httpapi.CodeBadRequest) {
		t.Errorf("pick of a stranger = %v; want 400", err)
	}
	picked, err := d.client.PickAttempt(ctx, set.ID, attempts.PickRequest{Session: byAgent["alpha"].Session})
	if err != nil {
		t.Fatal(err)
	}
	if picked.State != attempts.SetPicked || picked.Picked != byAgent["alpha"].Session || picked.Merge.Into != "main" {
		t.Errorf("picked = %+v", picked)
	}
	if b, err := os.ReadFile(filepath.Join(repo, "alpha.txt")); err != nil || string(b) != "one\ntwo\n" {
		t.Errorf("main checkout's alpha.txt = %q, %v; want the picked attempt's work", b, err)
	}
	for _, agent := range []string{"beta", "gamma"} {
		id := byAgent[agent].Session
		if !branchExists(repo, "agentpool/"+id) {
			t.Errorf("%s's branch is gone; a pick without discard keeps it", agent)
		}
		if s, err := d.client.Session(ctx, id); err != nil || s.Status != "closed" {
			t.Errorf("%s's session after the pick = %+v, %v; want closed", agent, s.Status, err)
		}
	}
	if _, err := d.client.PickAttempt(ctx, set.ID, attempts.PickRequest{Session: byAgent["beta"].Session}); !httpapi.IsCode(err, httpapi.CodeConflict) {
		t.Errorf("second pick = %v; want 409", err)
	}

	// Two attempts of one agent through the CLI, picked with discard.
	out, err := d.cli("attempt", "again", "--agent", "beta", "--n", "2", "--repo", repo, "--wait")
	if err != nil {
		t.Fatalf("attempt --wait: %v\n%s", err, out)
	}
	t.Logf("attempt --wait:\n%s", out)
	m := regexp.MustCompile(`attempts (att-\S+) \(done\)`).FindStringSubmatch(out)
	if m == nil || strings.Count(out, "+4 -0") != 2 || !strings.Contains(out, "attempt pick "+m[1]) {
		t.Fatalf("attempt --wait printed no comparison of two done attempts:\n%s", out)
	}
	set2, err := d.client.GetAttempts(ctx, m[1], 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(set2.Attempts) != 2 || set2.Attempts[0].Check != nil {
		t.Fatalf("set2 = %+v; want 2 attempts without check", set2)
	}
	out, err = d.cli("attempt", "pick", set2.ID, set2.Attempts[0].Session, "--discard", "--squash")
	if err != nil || !strings.Contains(out, "closed "+set2.Attempts[1].Session+" (beta), its branch deleted") {
		t.Fatalf("attempt pick --discard: %v\n%s", err, out)
	}
	if branchExists(repo, "agentpool/"+set2.Attempts[1].Session) {
		t.Error("the other attempt's branch is kept; discard deletes it")
	}
	if out, err := d.cli("attempt", "list"); err != nil || !strings.Contains(out, set2.ID) || !strings.Contains(out, set.ID) {
		t.Errorf("attempt list: %v\n%s", err, out)
	}

	// The sets survive a restart.
	_ = d.cmd.Process.Signal(os.Interrupt)
	_ = d.cmd.Wait()
	d2 := startDaemon(t, bin, home)
	d2.stopAtCleanup()
	list, err := d2.client.ListAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != set2.ID || list[1].State != attempts.SetPicked || list[1].Picked != byAgent["alpha"].Session {
		t.Errorf("sets after a restart = %+v", list)
	}
}

// TestEndToEndAttemptsInterrupted stops the daemon while attempts run:
// the next daemon lists the set, done, its attempts failed and saying
// they were interrupted, rather than running forever.
func TestEndToEndAttemptsInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	writeScripted(t, home, bin, map[string]any{"slow": map[string]any{"agent_name": "slow", "turns": []any{
		map[string]any{"steps": []any{map[string]any{"sleep_ms": 60000}, map[string]any{"chunk": "late\n"}}}}}})
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "# slow\n"})
	d := startDaemon(t, bin, home)
	ctx := context.Background()
	set, err := d.client.StartAttempts(ctx, attempts.Request{Prompt: "take your time", Repo: repo, Agent: "slow", N: 2, Check: "true"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both attempts running", func() bool {
		s, err := d.client.GetAttempts(ctx, set.ID, 0)
		return err == nil && s.Attempts[0].State == attempts.AttemptRunning && s.Attempts[1].State == attempts.AttemptRunning
	})
	_ = d.cmd.Process.Signal(os.Interrupt)
	_ = d.cmd.Wait()

	d2 := startDaemon(t, bin, home)
	d2.stopAtCleanup()
	got, err := d2.client.GetAttempts(ctx, set.ID, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != attempts.SetDone {
		t.Errorf("set after the restart is %s; want done", got.State)
	}
	for _, a := range got.Attempts {
		if a.State != attempts.AttemptFailed || !strings.Contains(a.Error, "interrupted") || a.Check == nil || a.Check.State != attempts.CheckNone {
			t.Errorf("attempt after the restart = %+v check %+v; want failed, interrupted, no check", a, a.Check)
		}
	}
}
