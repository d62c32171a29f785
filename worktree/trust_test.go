package worktree

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// markerSetup copies .env and writes a marker: evidence of a setup run.
const markerSetup = `{"copy": [".env"], "setup": {"command": ["sh", "-c", "echo ran > marker"]}}`

func TestUntrustedSetupRunsNothing(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := setupRepo(t, markerSetup)
	writeFile(t, repo, ".env", "SECRET=1\n")

	wt := create(t, m, "s", repo)
	var rec setupRecorder
	end, err := m.RunSetup(ctx, wt, rec.report)
	if err != nil {
		t.Fatalf("RunSetup() error = %v", err)
	}
	if got := rec.kinds(); got != SetupUntrusted {
		t.Fatalf("events = %s; want %s alone", got, SetupUntrusted)
	}
	if _, err := os.Stat(filepath.Join(wt.Path, "marker")); err == nil {
		t.Error("the untrusted setup command ran")
	}
	if _, err := os.Stat(filepath.Join(wt.Path, ".env")); err == nil {
		t.Error("the untrusted copy list was copied")
	}
	sf, err := m.SetupFileOf(ctx, repo)
	if err != nil || sf.Trusted {
		t.Fatalf("SetupFileOf() = %+v, %v; want an untrusted file", sf, err)
	}
	if end.SHA256 != sf.SHA256 || end.Content != markerSetup || end.Repo != repo || end.TrustCommand != "agentpool trust "+shellQuote(repo) ||
		strings.Join(end.CopyList, " ") != ".env" || !strings.Contains(strings.Join(end.Command, " "), "marker") {
		t.Errorf("untrusted event = %+v; want the file's hash %s, content, copy list, command and the trust command", end, sf.SHA256)
	}
	// Checkpoints do not wait for a skipped setup.
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	if err := m.PrepareSetup(ctx, wt); !errors.Is(err, ErrUntrusted) {
		t.Errorf("PrepareSetup() untrusted = %v; want ErrUntrusted", err)
	}

	// Trusted, the waiting session can run it now.
	_, waiting, err := m.Trust(ctx, repo, sf.SHA256)
	if err != nil || strings.Join(waiting, " ") != "s" {
		t.Fatalf("Trust() = %v, %v; want session s waiting", waiting, err)
	}
	if err := m.PrepareSetup(ctx, wt); err != nil {
		t.Fatalf("PrepareSetup() trusted = %v", err)
	}
	if err := m.PrepareSetup(ctx, wt); !errors.Is(err, ErrSetupRunning) {
		t.Errorf("PrepareSetup() while pending = %v; want ErrSetupRunning", err)
	}
	var rec2 setupRecorder
	if end, err := m.RunSetup(ctx, wt, rec2.report); err != nil || !end.OK {
		t.Fatalf("RunSetup() after trust = %+v, %v", end, err)
	}
	if got := rec2.kinds(); got != "copied,started,ended" {
		t.Errorf("events after trust = %s; want copied,started,ended", got)
	}
	if readFile(t, wt.Path, "marker") != "ran\n" || readFile(t, wt.Path, ".env") != "SECRET=1\n" {
		t.Error("the trusted setup did not copy and run")
	}
	if w := m.skippedSessions(repo); len(w) != 0 {
		t.Errorf("sessions waiting after their setup ran = %v", w)
	}
}

func TestTrustedSetupRunsAndAChangeNeedsTrustAgain(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := setupRepo(t, markerSetup)
	trustRepo(t, m, repo)
	wt := create(t, m, "s1", repo)
	var rec setupRecorder
	if end, err := m.RunSetup(ctx, wt, rec.report); err != nil || !end.OK || readFile(t, wt.Path, "marker") != "ran\n" {
		t.Fatalf("trusted RunSetup() = %+v, %v (events %s); want it run", end, err, rec.kinds())
	}
	old, err := m.SetupFileOf(ctx, repo)
	if err != nil || !old.Trusted || old.TrustedAt.IsZero() {
		t.Fatalf("SetupFileOf() = %+v, %v; want trusted", old, err)
	}

	// One byte changed (as a merged agent branch would): untrusted again.
	writeFile(t, repo, SetupFileName, strings.Replace(markerSetup, "echo ran", "echo ran;", 1))
	wt2 := create(t, m, "s2", repo)
	var rec2 setupRecorder
	end, err := m.RunSetup(ctx, wt2, rec2.report)
	if err != nil || rec2.kinds() != SetupUntrusted || end.TrustedSHA256 != old.SHA256 || end.SHA256 == old.SHA256 {
		t.Fatalf("RunSetup() after a change = %+v, %v (events %s); want untrusted, naming the hash trusted before", end, err, rec2.kinds())
	}
	if _, err := os.Stat(filepath.Join(wt2.Path, "marker")); err == nil {
		t.Error("the changed setup command ran")
	}

	// Revoked, even the old content is no longer trusted.
	if found, err := m.Revoke(ctx, repo); err != nil || !found {
		t.Fatalf("Revoke() = %v, %v", found, err)
	}
	if list, err := m.TrustList(); err != nil || len(list) != 0 {
		t.Errorf("TrustList() after Revoke = %v, %v; want empty", list, err)
	}
}

func TestTrustRefusesAChangedFile(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := setupRepo(t, markerSetup)
	shown, err := m.SetupFileOf(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, repo, SetupFileName, `{"setup": {"command": ["sh", "-c", "echo evil > marker"]}}`)
	if _, _, err := m.Trust(ctx, repo, shown.SHA256); !errors.Is(err, ErrSetupChanged) {
		t.Fatalf("Trust() with the hash of what was shown = %v; want ErrSetupChanged", err)
	}
	if list, _ := m.TrustList(); len(list) != 0 {
		t.Errorf("TrustList() = %v; want nothing recorded", list)
	}
	now, _ := m.SetupFileOf(ctx, repo)
	if _, _, err := m.Trust(ctx, repo, now.SHA256); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(m.trustFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trust record: %v, %v; want mode 0600", fi, err)
	}
	if list, _ := m.TrustList(); len(list) != 1 || list[0].Repo != repo || list[0].SHA256 != now.SHA256 {
		t.Errorf("TrustList() = %+v; want %s at %s", list, repo, now.SHA256)
	}
}

func TestSymlinkedSetupFileIsNotFollowed(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	outside := filepath.Join(t.TempDir(), "elsewhere.json")
	must(t, os.WriteFile(outside, []byte(markerSetup), 0o644))
	must(t, os.Symlink(outside, filepath.Join(repo, SetupFileName)))
	_, err := m.Create(context.Background(), "s", repo, "")
	if !errors.Is(err, ErrSetupConfig) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Create() with a symlinked setup file: %v; want ErrSetupConfig saying it is a symbolic link", err)
	}
	if _, err := m.SetupFileOf(context.Background(), repo); !errors.Is(err, ErrSetupConfig) {
		t.Errorf("SetupFileOf() = %v; want ErrSetupConfig", err)
	}
}

func TestSetupEnvDropsAgentpoolVariables(t *testing.T) {
	env := setupEnv([]string{"PATH=/bin", "AGENTPOOL_TOKEN=secret", "AGENTPOOL_HOME=/h", "GIT_DIR=/x"}, Worktree{Session: "s", Path: "/w"}, "/r")
	got := strings.Join(env, " ")
	if strings.Contains(got, "secret") || strings.Contains(got, "AGENTPOOL_HOME") || strings.Contains(got, "GIT_DIR") || !strings.Contains(got, "AGENTPOOL_SESSION=s") {
		t.Errorf("setupEnv() = %q; want no token, home or GIT_DIR, and the session", got)
	}
}

// fakeSandbox records the setup commands it confines.
type fakeSandbox struct {
	mu       sync.Mutex
	jobs     []SetupJob
	released int
}

func (f *fakeSandbox) Confine(_ context.Context, job SetupJob, cmd *exec.Cmd) (SetupConfinement, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, job)
	cmd.Env = append(cmd.Env, "CONFINED=yes")
	return SetupConfinement{Containment: "test", Landlock: 7}, func() { f.mu.Lock(); f.released++; f.mu.Unlock() }, nil
}

func TestSetupCommandGoesThroughTheSandbox(t *testing.T) {
	ctx := context.Background()
	sb := &fakeSandbox{}
	m := newManager(t)
	m.sandbox = sb
	repo := setupRepo(t, `{"setup": {"command": ["sh", "-c", "echo $CONFINED > marker"]}}`)
	trustRepo(t, m, repo)
	wt := create(t, m, "s", repo)
	var started SetupEvent
	end, err := m.RunSetup(ctx, wt, func(ev SetupEvent) {
		if ev.Kind == SetupStarted {
			started = ev
		}
	})
	if err != nil || !end.OK {
		t.Fatalf("RunSetup() = %+v, %v", end, err)
	}
	if readFile(t, wt.Path, "marker") != "yes\n" || len(sb.jobs) != 1 || sb.released != 1 {
		t.Errorf("sandbox saw %d jobs, released %d; marker %q; want the command confined once and released", len(sb.jobs), sb.released, readFile(t, wt.Path, "marker"))
	}
	if j := sb.jobs[0]; j.Repo != repo || j.Worktree.Path != wt.Path || j.Git.CommonDir == "" || j.Git.AdminDir == "" {
		t.Errorf("job = %+v; want the worktree, the main checkout and its git directories", j)
	}
	if started.Confinement == nil || started.Confinement.Landlock != 7 {
		t.Errorf("started = %+v; want the confinement reported", started)
	}
}
