package worktree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseSetup(t *testing.T) {
	tests := []struct {
		name, in string
		want     Setup
		wantErr  string
	}{
		{"full", `{"version": 1, "copy": [".env", "config/*.local", "certs"], "setup": {"command": ["sh", "-c", "npm ci"], "timeout": "5m"}}`,
			Setup{Copy: []string{".env", "config/*.local", "certs"}, Command: []string{"sh", "-c", "npm ci"}, Timeout: 5 * time.Minute}, ""},
		{"default timeout", `{"setup": {"command": ["make"]}}`, Setup{Command: []string{"make"}, Timeout: DefaultSetupTimeout}, ""},
		{"copy only", `{"copy": [".env"]}`, Setup{Copy: []string{".env"}}, ""},
		{"unknown field", `{"cpy": [".env"]}`, Setup{}, `unknown field "cpy"`},
		{"unknown setup field", `{"setup": {"command": ["make"], "shell": true}}`, Setup{}, `unknown field "shell"`},
		{"trailing data", `{"copy": []} {}`, Setup{}, "line 1, column 14: unexpected data after the JSON object"},
		{"syntax error", "{\n  \"copy\": [\".env\",]\n}", Setup{}, "line 2, column"},
		{"type error", "{\n  \"copy\": \".env\"\n}", Setup{}, "line 2, column 11: copy: want an array of strings"},
		{"empty", ``, Setup{}, "empty file"},
		{"version", `{"version": 2}`, Setup{}, "version: 2 is not supported"},
		{"empty command", `{"setup": {"command": []}}`, Setup{}, "setup.command: must be a non-empty array"},
		{"empty program", `{"setup": {"command": [""]}}`, Setup{}, "setup.command[0]"},
		{"bad timeout", `{"setup": {"command": ["make"], "timeout": "5 minutes"}}`, Setup{}, `setup.timeout: "5 minutes" is not a duration`},
		{"negative timeout", `{"setup": {"command": ["make"], "timeout": "-1s"}}`, Setup{}, "setup.timeout: -1s is not within"},
		{"huge timeout", `{"setup": {"command": ["make"], "timeout": "100h"}}`, Setup{}, "is not within"},
		{"parent", `{"copy": ["../secrets"]}`, Setup{}, `copy[0]: "../secrets": leaves the repository`},
		{"parent inside", `{"copy": ["a/../../b"]}`, Setup{}, "not a clean path"},
		{"glob parent", `{"copy": ["*/.."]}`, Setup{}, "not a clean path"},
		{"dotdot component", `{"copy": ["..", "x"]}`, Setup{}, "leaves the repository"},
		{"absolute", `{"copy": ["/etc/passwd"]}`, Setup{}, "absolute"},
		{"git dir", `{"copy": [".git/config"]}`, Setup{}, "names .git"},
		{"git dir case", `{"copy": ["sub/.GIT"]}`, Setup{}, "names .git"},
		{"backslash", `{"copy": ["a\\b"]}`, Setup{}, `contains "\"`},
		{"bad glob", `{"copy": ["[a"]}`, Setup{}, "bad pattern"},
		{"empty pattern", `{"copy": [""]}`, Setup{}, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSetup([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSetup(%q) error = %v; want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSetup(%q) error = %v", tt.in, err)
			}
			if strings.Join(got.Copy, "|") != strings.Join(tt.want.Copy, "|") || strings.Join(got.Command, "|") != strings.Join(tt.want.Command, "|") || got.Timeout != tt.want.Timeout {
				t.Errorf("ParseSetup(%q) = %+v; want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestCreateRefusesAnInvalidSetupFile(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	writeFile(t, repo, SetupFileName, `{"copy": [".env"], "setup": {"comand": ["make"]}}`)
	_, err := m.Create(context.Background(), "s", repo, "")
	if !errors.Is(err, ErrSetupConfig) || !strings.Contains(err.Error(), SetupFileName) || !strings.Contains(err.Error(), `"comand"`) {
		t.Fatalf("Create() error = %v; want ErrSetupConfig naming the file and the field", err)
	}
	if branchTip(t, repo, "agentpool/s") != "" {
		t.Error("Create left a branch behind")
	}
}

// setupRecorder collects the events of a setup.
type setupRecorder struct {
	mu  sync.Mutex
	evs []SetupEvent
}

func (r *setupRecorder) report(ev SetupEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *setupRecorder) kinds() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var k []string
	for _, ev := range r.evs {
		if len(k) == 0 || k[len(k)-1] != ev.Kind {
			k = append(k, ev.Kind)
		}
	}
	return strings.Join(k, ",")
}

func (r *setupRecorder) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, ev := range r.evs {
		if ev.Kind == SetupOutput {
			b.WriteString(ev.Output + "\n")
		}
	}
	return b.String()
}

// trustRepo trusts the setup file of repo as it is.
func trustRepo(t *testing.T, m *Manager, repo string) {
	t.Helper()
	sf, err := m.SetupFileOf(context.Background(), repo)
	if err != nil {
		t.Fatalf("SetupFileOf(%q) error = %v", repo, err)
	}
	if _, _, err := m.Trust(context.Background(), repo, sf.SHA256); err != nil {
		t.Fatalf("Trust(%q) error = %v", repo, err)
	}
}

// setupRepo makes a repository with the setup file content.
func setupRepo(t *testing.T, setup string) string {
	t.Helper()
	repo := newRepo(t, "repo", map[string]string{"README.md": "hello\n", ".gitignore": ".env\n*.secret\nconfig/local/\nlinks/\n"})
	writeFile(t, repo, SetupFileName, setup)
	return repo
}

func TestRunSetupCopiesAndRuns(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := setupRepo(t, `{
  "copy": [".env", "*.secret", "config/local", "README.md", "links/*", "missing.txt"],
  "setup": {"command": ["sh", "-c", "echo out; echo err >&2; cat .env > seen; echo \"$AGENTPOOL_SESSION\" >> seen; printf 'no newline'"], "timeout": "30s"}
}`)
	trustRepo(t, m, repo)
	writeFile(t, repo, ".env", "TOKEN=1\n")
	must(t, os.Chmod(filepath.Join(repo, ".env"), 0o600))
	writeFile(t, repo, "a.secret", "a\n")
	writeFile(t, repo, "config/local/db.json", "{}\n")
	writeFile(t, repo, "config/local/run.sh", "#!/bin/sh\n")
	must(t, os.Chmod(filepath.Join(repo, "config/local/run.sh"), 0o755))
	writeFile(t, repo, "README.md", "the user's unfinished edit\n")
	must(t, os.MkdirAll(filepath.Join(repo, "links"), 0o755))
	must(t, os.Symlink("../.env", filepath.Join(repo, "links", "inside")))
	must(t, os.Symlink(filepath.Join(repo, "a.secret"), filepath.Join(repo, "links", "absolute")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(repo, "links", "outside")))
	must(t, os.Symlink("../../x", filepath.Join(repo, "links", "up")))

	wt := create(t, m, "s", repo)
	var rec setupRecorder
	end, err := m.RunSetup(ctx, wt, rec.report)
	if err != nil {
		t.Fatalf("RunSetup() error = %v", err)
	}
	if got := rec.kinds(); got != "copied,started,output,ended" {
		t.Errorf("events = %s; want copied,started,output,ended", got)
	}
	if !end.OK || end.ExitCode == nil || *end.ExitCode != 0 || end.Error != "" {
		t.Errorf("ended = %+v; want ok with exit 0", end)
	}
	copied := rec.evs[0]
	wantCopied := ".env a.secret config/local/db.json config/local/run.sh links/absolute links/inside"
	if got := strings.Join(copied.Copied, " "); got != wantCopied {
		t.Errorf("copied = %q; want %q", got, wantCopied)
	}
	skipped := map[string]string{}
	for _, s := range copied.Skipped {
		skipped[s.Path] = s.Reason
	}
	for path, reason := range map[string]string{"README.md": "tracked", "links/outside": "leaves the repository", "links/up": "leaves the repository", "missing.txt": "matches nothing"} {
		if !strings.Contains(skipped[path], reason) {
			t.Errorf("skipped[%s] = %q; want %q", path, skipped[path], reason)
		}
	}
	if fi, err := os.Stat(filepath.Join(wt.Path, ".env")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf(".env in the worktree: %v, %v; want mode 0600", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(wt.Path, "config/local/run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh in the worktree: %v, %v; want mode 0755", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(wt.Path, "links", "inside")); err != nil || l != "../.env" {
		t.Errorf("links/inside = %q, %v; want a link to ../.env", l, err)
	}
	if l, err := os.Readlink(filepath.Join(wt.Path, "links", "absolute")); err != nil || l != "../a.secret" {
		t.Errorf("links/absolute = %q, %v; want it made relative", l, err)
	}
	if readFile(t, wt.Path, "README.md") != "hello\n" {
		t.Error("the tracked README.md was overwritten with the main checkout's edit")
	}
	if got := readFile(t, wt.Path, "seen"); got != "TOKEN=1\ns\n" {
		t.Errorf("the command saw %q; want .env and the session id", got)
	}
	if out := rec.output(); !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") || !strings.Contains(out, "no newline\n") {
		t.Errorf("output = %q; want stdout, stderr and the unterminated line", out)
	}
	// A setup runs once.
	if again, err := m.RunSetup(ctx, wt, rec.report); err != nil || again.Kind != "" {
		t.Errorf("second RunSetup() = %+v, %v; want nothing", again, err)
	}
}

func TestRunSetupFailures(t *testing.T) {
	tests := []struct {
		name, setup string
		wantCode    int
		wantErr     string
		maxElapsed  time.Duration
	}{
		{"exit status", `{"setup": {"command": ["sh", "-c", "echo broken >&2; exit 3"]}}`, 3, "exit status 3", 20 * time.Second},
		{"not found", `{"setup": {"command": ["no-such-program-agentpool"]}}`, -1, "executable file not found", 20 * time.Second},
		{"timeout", `{"setup": {"command": ["sh", "-c", "sleep 60 & sleep 60"], "timeout": "300ms"}}`, -1, "timed out after 300ms", 20 * time.Second},
		{"copy fails, command runs", `{"copy": ["*.env"], "setup": {"command": ["true"]}}`, 0, "copy:", 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t)
			repo := setupRepo(t, tt.setup)
			trustRepo(t, m, repo)
			if strings.Contains(tt.setup, "*.env") {
				writeFile(t, repo, "x.env", "x\n")
				must(t, os.Chmod(filepath.Join(repo, "x.env"), 0o000)) // unreadable
				if f, err := os.Open(filepath.Join(repo, "x.env")); err == nil {
					f.Close()
					t.Skip("running as root: permissions do not stop reads")
				}
			}
			wt := create(t, m, "s", repo)
			var rec setupRecorder
			end, err := m.RunSetup(context.Background(), wt, rec.report)
			if err != nil {
				t.Fatalf("RunSetup() error = %v", err)
			}
			if end.OK || end.ExitCode == nil || *end.ExitCode != tt.wantCode || !strings.Contains(end.Error, tt.wantErr) || end.Elapsed > tt.maxElapsed {
				code := "nil"
				if end.ExitCode != nil {
					code = string(rune('0' + *end.ExitCode))
				}
				t.Errorf("ended = ok %v, exit %s, error %q, elapsed %s; want failure %d %q", end.OK, code, end.Error, end.Elapsed, tt.wantCode, tt.wantErr)
			}
			if tt.name == "exit status" && !strings.Contains(strings.Join(end.Tail, "\n"), "broken") {
				t.Errorf("tail = %q; want the command's last output", end.Tail)
			}
		})
	}
}

func TestSetupOutputIsBounded(t *testing.T) {
	m := newManager(t)
	repo := setupRepo(t, `{"setup": {"command": ["sh", "-c", "i=0; while [ $i -lt 4000 ]; do echo line $i of a lot of output from the setup; i=$((i+1)); done"]}}`)
	trustRepo(t, m, repo)
	wt := create(t, m, "s", repo)
	var rec setupRecorder
	end, err := m.RunSetup(context.Background(), wt, rec.report)
	if err != nil || !end.OK {
		t.Fatalf("RunSetup() = %+v, %v", end, err)
	}
	if n := len(rec.output()); n > maxSetupOutput+100 {
		t.Errorf("reported %d bytes of output; want at most about %d", n, maxSetupOutput)
	}
	if end.DroppedBytes == 0 || len(end.Tail) != setupTailLines || end.Tail[len(end.Tail)-1] != "line 3999 of a lot of output from the setup" {
		t.Errorf("ended: dropped %d, tail %q; want dropped output and the last lines", end.DroppedBytes, end.Tail)
	}
}

func TestCheckpointWaitsForSetup(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := setupRepo(t, `{"setup": {"command": ["sh", "-c", "sleep 0.5; echo done > made-by-setup"]}}`)
	trustRepo(t, m, repo)
	wt := create(t, m, "s", repo)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := m.WaitSetup(short, wt); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitSetup() before the setup ran = %v; want the context's deadline", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = m.RunSetup(ctx, wt, func(SetupEvent) {})
	}()
	tree, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, repo, "ls-tree", "--name-only", tree); !strings.Contains(got, "made-by-setup") {
		t.Errorf("checkpoint holds %q; want what the setup made", got)
	}
	<-done
	if err := m.WaitSetup(ctx, wt); err != nil {
		t.Errorf("WaitSetup() after the setup = %v", err)
	}
}

func TestRemoveStopsSetup(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := setupRepo(t, `{"setup": {"command": ["sh", "-c", "echo started; sleep 60"]}}`)
	trustRepo(t, m, repo)
	wt := create(t, m, "s", repo)
	started := make(chan struct{})
	var once sync.Once
	ended := make(chan SetupEvent, 1)
	go func() {
		end, _ := m.RunSetup(ctx, wt, func(ev SetupEvent) {
			if ev.Kind == SetupOutput {
				once.Do(func() { close(started) })
			}
		})
		ended <- end
	}()
	<-started
	start := time.Now()
	if _, err := m.Remove(ctx, wt, false); err != nil {
		t.Fatal(err)
	}
	end := <-ended
	if end.OK || !strings.Contains(end.Error, "being removed") || time.Since(start) > 15*time.Second {
		t.Errorf("ended = %+v after %s; want the setup stopped by the removal", end, time.Since(start))
	}

	// A setup that never ran is dropped by Remove, and RunSetup then does nothing.
	wt2 := create(t, m, "s2", repo)
	if _, err := m.Remove(ctx, wt2, true); err != nil {
		t.Fatal(err)
	}
	if end, err := m.RunSetup(ctx, wt2, func(SetupEvent) { t.Error("a removed worktree's setup reported") }); err != nil || end.Kind != "" {
		t.Errorf("RunSetup() after Remove = %+v, %v", end, err)
	}
}
