package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/httpapi"
)

// hostileSetup is a setup command that records what it could do (and the
// error of what it could not): write its worktree, read the daemon's
// token, write the daemon's home and the main checkout, and which cgroup
// it ran in.
func hostileSetup(home, repo string) string {
	script := fmt.Sprintf(`echo ran > marker
cat /proc/self/cgroup > cgroup.txt
try() { what=$1; shift; if err=$("$@" 2>&1 >/dev/null); then echo "$what: allowed" >> result.txt; else echo "$what: refused: $err" >> result.txt; fi; }
try token-read cat %[1]s/token
try home-write sh -c 'echo x > %[1]s/pwned'
try main-write sh -c 'echo x > %[2]s/pwned'
try git-status git status --short
`, shellQuote(home), shellQuote(repo))
	b, _ := json.Marshal(map[string]any{"copy": []string{".env"}, "setup": map[string]any{"command": []string{"sh", "-c", script}, "timeout": "1m"}})
	return string(b)
}

// TestEndToEndSetupNeedsTrust: a repository's committed .agentpool.json
// runs nothing until the user trusts it; once trusted it runs confined
// (its own cgroup in the daemon's tree, its own view: no token, no daemon
// home, no main checkout); a change merged from an agent's branch makes it
// untrusted again.
func TestEndToEndSetupNeedsTrust(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	agenttest.RequireFeature(t, sandbox.LandlockABI() > 0, "Landlock")
	bin := agentpoolBinary(t)
	home := t.TempDir()
	repoDir := filepath.Join(t.TempDir(), "repo")
	repo := e2eRepoAt(t, repoDir, map[string]string{"README.md": "# project\n", ".gitignore": ".env\n"})
	if err := os.WriteFile(filepath.Join(repo, ".agentpool.json"), []byte(hostileSetup(home, repo)), 0o644); err != nil {
		t.Fatal(err)
	}
	e2eGit(t, repo, "add", ".agentpool.json")
	e2eGit(t, repo, "commit", "-q", "-m", "setup")
	if err := os.WriteFile(filepath.Join(repo, ".env"), []byte("SECRET=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, bin, home)
	defer func() {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
	}()
	ctx := context.Background()

	// Untrusted: the session works, nothing ran, and everyone says how to trust.
	out, err := d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil {
		t.Fatalf("session new: %v\n%s", err, out)
	}
	if !strings.Contains(out, "is not trusted") || !strings.Contains(out, "trust "+repo) {
		t.Errorf("session new does not say the setup is untrusted and how to trust it:\n%s", out)
	}
	id := d.newSessionID(out)
	sess, err := d.client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ev := d.waitEvent(id, "setup.untrusted")
	var untrusted struct {
		SHA256       string `json:"sha256"`
		Content      string `json:"content"`
		TrustCommand string `json:"trust_command"`
	}
	if err := json.Unmarshal(ev.Data, &untrusted); err != nil || len(untrusted.SHA256) != 64 || !strings.Contains(untrusted.Content, "marker") ||
		untrusted.TrustCommand != "agentpool trust "+repo {
		t.Errorf("setup.untrusted = %s; want the hash, the content and the trust command", ev.Data)
	}
	for _, f := range []string{"marker", ".env"} {
		if _, err := os.Stat(filepath.Join(sess.Worktree.Path, f)); err == nil {
			t.Errorf("%s exists in the worktree: the untrusted setup ran", f)
		}
	}
	if out, _ := d.cli("events", id); !strings.Contains(out, "setup skipped: ") || !strings.Contains(out, "trust it with: agentpool trust") {
		t.Errorf("events does not render setup.untrusted readably:\n%s", out)
	}

	// Without a terminal and without --yes, nothing is trusted.
	if out, err := d.cli("trust", repo); err == nil || !strings.Contains(out, "--yes") || !strings.Contains(out, "marker") {
		t.Errorf("trust without a terminal or --yes: %v\n%s; want a refusal after showing the file", err, out)
	}
	// The API trusts only the content whose hash the caller was shown.
	if _, err := d.client.Trust(ctx, repo, strings.Repeat("0", 64)); !httpapi.IsCode(err, httpapi.CodeConflict) {
		t.Errorf("POST /v1/trust with another hash: %v; want 409 conflict", err)
	}
	out, err = d.cli("trust", "--yes", repo)
	if err != nil || !strings.Contains(out, "trusted: ") || !strings.Contains(out, "skipped this setup: "+id) {
		t.Fatalf("trust --yes: %v\n%s", err, out)
	}
	if out, err := d.cli("trust", "--list"); err != nil || !strings.Contains(out, repo+"  sha256 "+untrusted.SHA256[:12]) {
		t.Errorf("trust --list: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(home, "trusted.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trusted.json: %v, %v; want mode 0600 in the daemon's home", fi, err)
	}
	if out, err := d.cli("session", "setup", id); err != nil {
		t.Fatalf("session setup: %v\n%s", err, out)
	}
	ended := d.waitEvent(id, "setup.ended")
	started := d.waitEvent(id, "setup.started")
	t.Logf("setup.started: %s", started.Data)
	var end struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal(ended.Data, &end); err != nil || !end.OK {
		t.Fatalf("setup.ended = %s; want ok; daemon log:\n%s", ended.Data, d.out)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(sess.Worktree.Path, name))
		return string(b)
	}
	if read("marker") != "ran\n" || read(".env") != "SECRET=1\n" {
		t.Errorf("trusted setup: marker %q, .env %q; want both", read("marker"), read(".env"))
	}
	result := read("result.txt")
	t.Logf("result.txt:\n%s", result)
	// In the setup's view, the token is not there; the daemon's home and
	// the main checkout are read-only, shown only as the ways to the
	// worktree and to the repository's git directory.
	for _, want := range []string{
		"token-read: refused: cat: " + filepath.Join(home, "token") + ": No such file or directory\n",
		"home-write: refused: ", filepath.Join(home, "pwned") + ": Read-only file system\n",
		"main-write: refused: ", filepath.Join(repo, "pwned") + ": Read-only file system\n",
		"git-status: allowed\n",
	} {
		if !strings.Contains(result, want) {
			t.Errorf("setup confinement: want %q in\n%s", want, result)
		}
	}
	for _, p := range []string{filepath.Join(home, "pwned"), filepath.Join(repo, "pwned")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the setup wrote %s", p)
		}
	}
	if tree, err := os.ReadFile(filepath.Join(home, "cgroup")); err == nil {
		cg := read("cgroup.txt")
		if !strings.Contains(cg, "/"+filepath.Base(strings.TrimSpace(string(tree)))+"/") || !strings.Contains(cg, "/_setup") {
			t.Errorf("the setup ran in cgroup %q; want one under the daemon's tree %s", cg, tree)
		}
	} else {
		agenttest.RequireFeature(t, false, "a writable cgroup v2 for the daemon")
	}

	// The agent changes .agentpool.json on its branch; merged, the next
	// session runs nothing until it is trusted again.
	if err := os.WriteFile(filepath.Join(sess.Worktree.Path, ".agentpool.json"),
		[]byte(`{"setup": {"command": ["sh", "-c", "echo agent > agent-was-here"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"marker", "cgroup.txt", "result.txt"} {
		_ = os.Remove(filepath.Join(sess.Worktree.Path, f))
	}
	if out, err := d.cli("session", "merge", id); err != nil {
		t.Fatalf("session merge: %v\n%s", err, out)
	}
	out, err = d.cli("session", "new", "--repo", repo, "--agent", "demo")
	if err != nil || !strings.Contains(out, "changed since you trusted it") {
		t.Errorf("session new after the merge: %v\n%s; want the file untrusted again", err, out)
	}
	id2 := d.newSessionID(out)
	s2, err := d.client.Session(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	d.waitEvent(id2, "setup.untrusted")
	if _, err := os.Stat(filepath.Join(s2.Worktree.Path, "agent-was-here")); err == nil {
		t.Error("the agent's merged setup command ran without trust")
	}
	if out, err := d.cli("session", "setup", id2); err == nil || !strings.Contains(out, "not trusted") {
		t.Errorf("session setup of an untrusted file: %v\n%s; want a refusal", err, out)
	}
	if out, err := d.cli("trust", "--revoke", repo); err != nil {
		t.Errorf("trust --revoke: %v\n%s", err, out)
	}
	if list, err := d.client.TrustList(ctx); err != nil || len(list) != 0 {
		t.Errorf("GET /v1/trust after --revoke = %v, %v; want empty", list, err)
	}
}

// newSessionID returns the id in `session new`'s output.
func (d *daemon) newSessionID(out string) string {
	d.t.Helper()
	_, rest, ok := strings.Cut(out, "session ")
	id, _, ok2 := strings.Cut(rest, " created")
	if !ok || !ok2 || id == "" {
		d.t.Fatalf("session new output has no id:\n%s", out)
	}
	return id
}
