package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestCreate(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "proj", map[string]string{"a.txt": "one\n"})
	first := gitT(t, repo, "rev-parse", "HEAD")
	gitT(t, repo, "tag", "v1")
	writeFile(t, repo, "a.txt", "two\n")
	gitT(t, repo, "commit", "-q", "-am", "second")
	second := gitT(t, repo, "rev-parse", "HEAD")

	tests := []struct {
		name, base, want string
	}{
		{"default HEAD", "", second},
		{"HEAD", "HEAD", second},
		{"branch", "main", second},
		{"tag", "v1", first},
		{"relative", "HEAD~1", first},
		{"commit id", first, first},
		{"short id", first[:8], first},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			session := fmt.Sprintf("s%d", i)
			// A subdirectory of the repository names it just as well.
			wt, err := m.Create(context.Background(), session, filepath.Join(repo, "."), tt.base)
			if err != nil {
				t.Fatalf("Create(%q, base %q) error = %v", session, tt.base, err)
			}
			if wt.BaseCommit != tt.want {
				t.Errorf("Create(base %q).BaseCommit = %s; want %s", tt.base, wt.BaseCommit, tt.want)
			}
			if wt.Repo != repo || wt.Session != session || wt.Branch != "agentpool/"+session || wt.CreatedAt.IsZero() {
				t.Errorf("Create() = %+v; want repo %s, branch agentpool/%s, a creation time", wt, repo, session)
			}
			ns := filepath.Base(filepath.Dir(wt.Path))
			if filepath.Dir(filepath.Dir(wt.Path)) != m.Root() || filepath.Base(wt.Path) != session ||
				!strings.HasPrefix(ns, "proj-") || len(ns) != len("proj-")+repoHashLen {
				t.Errorf("Create().Path = %s; want %s/proj-<hash>/%s", wt.Path, m.Root(), session)
			}
			if within(repo, wt.Path) {
				t.Errorf("Create().Path = %s is inside the repository %s", wt.Path, repo)
			}
			if got := gitT(t, wt.Path, "symbolic-ref", "HEAD"); got != "refs/heads/agentpool/"+session {
				t.Errorf("worktree HEAD = %s; want refs/heads/agentpool/%s", got, session)
			}
			if got := gitT(t, wt.Path, "rev-parse", "HEAD"); got != tt.want {
				t.Errorf("worktree HEAD commit = %s; want %s", got, tt.want)
			}
			if got := gitT(t, wt.Path, "status", "--porcelain"); got != "" {
				t.Errorf("new worktree status = %q; want clean", got)
			}
		})
	}
	// Two repositories with the same name never share a namespace.
	other := newRepo(t, "proj", nil)
	wt := create(t, m, "s0", other)
	if filepath.Dir(wt.Path) == m.namespace(repo) {
		t.Errorf("Create in a second repo named proj used the first one's namespace %s", filepath.Dir(wt.Path))
	}
}

func TestCreateErrors(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	create(t, m, "taken", repo)
	plain := t.TempDir()
	bare := filepath.Join(t.TempDir(), "bare.git")
	gitT(t, plain, "init", "-q", "--bare", bare)
	empty := filepath.Join(t.TempDir(), "empty")
	gitT(t, plain, "init", "-q", empty)
	file := filepath.Join(plain, "file")
	writeFile(t, plain, "file", "x")

	tests := []struct {
		name, session, repo, base string
		want                      error
	}{
		{"plain directory", "s", plain, "", ErrNotRepository},
		{"no such directory", "s", filepath.Join(plain, "nope"), "", ErrNotRepository},
		{"a file", "s", file, "", ErrNotRepository},
		{"empty path", "s", "", "", ErrNotRepository},
		{"inside .git", "s", filepath.Join(repo, ".git"), "", ErrNotRepository},
		{"bare", "s", bare, "", ErrBareRepository},
		{"unknown ref", "s", repo, "no-such-branch", ErrUnknownRef},
		{"ref like an option", "s", repo, "--orphan", ErrUnknownRef},
		{"ref with newline", "s", repo, "main\nHEAD", ErrUnknownRef},
		{"tree is not a commit", "s", repo, "HEAD^{tree}", ErrUnknownRef},
		{"no commits", "s", empty, "", ErrUnknownRef},
		{"invalid session", "a/b", repo, "", ErrInvalidSession},
		{"empty session", "", repo, "", ErrInvalidSession},
		{"branch exists", "taken", repo, "", ErrExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wt, err := m.Create(context.Background(), tt.session, tt.repo, tt.base)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Create(%q, %q, %q) = %+v, %v; want error %v", tt.session, tt.repo, tt.base, wt, err, tt.want)
			}
		})
	}
	t.Run("directory exists", func(t *testing.T) {
		path := filepath.Join(m.namespace(repo), "squatted")
		writeFile(t, path, "keep.txt", "mine")
		if _, err := m.Create(context.Background(), "squatted", repo, ""); !errors.Is(err, ErrExists) {
			t.Fatalf("Create over an existing directory error = %v; want ErrExists", err)
		}
		if got := readFile(t, path, "keep.txt"); got != "mine" {
			t.Errorf("existing directory content = %q; want it untouched", got)
		}
		if out := gitT(t, repo, "branch", "--list", "agentpool/squatted"); out != "" {
			t.Errorf("branch created despite the error: %q", out)
		}
	})
}

func TestValidSession(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"abc", true}, {"01HZX3-session_7", true}, {"séance-été", true}, {"日本", true}, {"a.b", true},
		{"", false}, {"a/b", false}, {"..", false}, {"a..b", false}, {".hidden", false}, {"-x", false},
		{"x.lock", false}, {"x.", false}, {"a b", false}, {"a~b", false}, {"a^b", false}, {"a:b", false},
		{"a?b", false}, {"a*b", false}, {"a[b", false}, {`a\b`, false}, {"a@{b", false}, {"@", false},
		{"a\x00b", false}, {"a\tb", false}, {"a\x7fb", false}, {"\xff", false}, {strings.Repeat("x", 129), false},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.id), func(t *testing.T) {
			err := ValidSession(tt.id)
			if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrInvalidSession) {
				t.Fatalf("ValidSession(%q) = %v; want ok=%v", tt.id, err, tt.ok)
			}
			if tt.ok {
				// Whatever we accept, git accepts as a branch name.
				if out, err := gitRaw(dir, nil, "check-ref-format", "refs/heads/agentpool/"+tt.id); err != nil {
					t.Errorf("git check-ref-format rejects accepted session %q: %s", tt.id, out)
				}
			}
		})
	}
}

func TestCreateRootInsideRepo(t *testing.T) {
	repo := newRepo(t, "repo", nil)
	m, err := NewManager(Config{Root: filepath.Join(repo, ".agentpool", "worktrees")})
	if err != nil {
		t.Fatalf("NewManager() error = %v", err)
	}
	if wt, err := m.Create(context.Background(), "s", repo, ""); err == nil || !strings.Contains(err.Error(), "inside repository") {
		t.Fatalf("Create with the root inside the repo = %+v, %v; want an error", wt, err)
	}
}

// A root inside the repository is accepted when the repository ignores it
// (agentpool's own ./.agentpool data directory when run from a checkout):
// the worktree never shows up in the repository's status.
func TestCreateRootInsideRepoIgnored(t *testing.T) {
	repo := newRepo(t, "repo", map[string]string{".gitignore": "/.agentpool/\n"})
	m, err := NewManager(Config{Root: filepath.Join(repo, ".agentpool", "worktrees")})
	if err != nil {
		t.Fatalf("NewManager() error = %v", err)
	}
	wt, err := m.Create(context.Background(), "s", repo, "")
	if err != nil {
		t.Fatalf("Create with an ignored root inside the repo: %v", err)
	}
	if out := gitT(t, repo, "status", "--porcelain"); out != "" {
		t.Errorf("repository status shows the worktree: %q", out)
	}
	if _, err := m.Remove(context.Background(), wt, true); err != nil {
		t.Fatal(err)
	}
}

func TestCreateDirtyMainCheckout(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{"a.txt": "committed\n", "b.txt": "b\n"})
	writeFile(t, repo, "a.txt", "modified, not staged\n")
	writeFile(t, repo, "b.txt", "staged\n")
	gitT(t, repo, "add", "b.txt")
	writeFile(t, repo, "new.txt", "untracked\n")
	statusBefore := gitT(t, repo, "status", "--porcelain")
	indexBefore, _ := os.ReadFile(filepath.Join(repo, ".git", "index"))

	wt := create(t, m, "s", repo)
	for name, want := range map[string]string{"a.txt": "committed\n", "b.txt": "b\n", "new.txt": "<missing>"} {
		if got := readFile(t, wt.Path, name); got != want {
			t.Errorf("worktree %s = %q; want %q (the committed state)", name, got, want)
		}
	}
	if got := gitT(t, repo, "status", "--porcelain"); got != statusBefore {
		t.Errorf("main checkout status after Create = %q; want %q", got, statusBefore)
	}
	if indexAfter, _ := os.ReadFile(filepath.Join(repo, ".git", "index")); string(indexAfter) != string(indexBefore) {
		t.Errorf("main checkout index changed by Create")
	}
	if got := readFile(t, repo, "a.txt"); got != "modified, not staged\n" {
		t.Errorf("main checkout a.txt = %q; want the user's change", got)
	}
}

func TestCreateConcurrent(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	const n = 8
	var wg sync.WaitGroup
	wts := make([]Worktree, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wts[i], errs[i] = m.Create(context.Background(), fmt.Sprintf("c%d", i), repo, "")
		}()
	}
	// The same session twice at once: exactly one wins.
	dup := make([]error, 2)
	for i := range dup {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, dup[i] = m.Create(context.Background(), "dup", repo, "")
		}()
	}
	wg.Wait()
	paths := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Create(c%d) error = %v", i, err)
		}
		paths[wts[i].Path] = true
	}
	if len(paths) != n {
		t.Errorf("concurrent Create gave %d distinct paths; want %d", len(paths), n)
	}
	if (dup[0] == nil) == (dup[1] == nil) || !errors.Is(errors.Join(dup...), ErrExists) {
		t.Errorf("two Create(dup) at once = %v, %v; want one success and one ErrExists", dup[0], dup[1])
	}
	list, err := m.list(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n+2 {
		t.Errorf("git worktree list has %d entries; want %d", len(list), n+2)
	}
	for _, w := range list[1:] {
		if !exists(filepath.Join(w.Path, "README.md")) {
			t.Errorf("worktree %s has no checkout", w.Path)
		}
	}
}

func TestCreateSpacesAndNonASCII(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "my repo ü 日本", map[string]string{"dir with space/fïlé ü.txt": "hé\n", "plain.txt": "p\n"})
	wt := create(t, m, "séance-1", repo)
	if got := filepath.Base(filepath.Dir(wt.Path)); !strings.HasPrefix(got, "my repo ü 日本-") {
		t.Errorf("namespace = %q; want it to start with the repo name", got)
	}
	if got := readFile(t, wt.Path, "dir with space/fïlé ü.txt"); got != "hé\n" {
		t.Errorf("checked-out file = %q; want %q", got, "hé\n")
	}
	ctx := context.Background()
	c0, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	writeFile(t, wt.Path, "nouveau dossier/ça va.txt", "oui\n")
	writeFile(t, wt.Path, "dir with space/fïlé ü.txt", "changé\n")
	d, err := m.Diff(ctx, wt, c0, "")
	if err != nil {
		t.Fatalf("Diff() error = %v", err)
	}
	got := map[string]ChangeStatus{}
	for _, f := range d.Files {
		got[f.Path] = f.Status
	}
	want := map[string]ChangeStatus{"nouveau dossier/ça va.txt": StatusAdded, "dir with space/fïlé ü.txt": StatusModified}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Diff().Files = %v; want %v", got, want)
	}
	if err := m.Restore(ctx, wt, c0); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	if exists(filepath.Join(wt.Path, "nouveau dossier")) || readFile(t, wt.Path, "dir with space/fïlé ü.txt") != "hé\n" {
		t.Errorf("Restore() left the worktree unrestored")
	}
	writeFile(t, wt.Path, "nouveau dossier/ça va.txt", "oui\n")
	res, err := m.Remove(ctx, wt, false)
	if err != nil || !res.Committed {
		t.Fatalf("Remove() = %+v, %v; want committed work", res, err)
	}
	if got := gitT(t, repo, "show", "agentpool/séance-1:nouveau dossier/ça va.txt"); got != "oui" {
		t.Errorf("preserved file on the branch = %q; want %q", got, "oui")
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{".gitattributes": "*.boom filter=boom\n"})
	gitT(t, repo, "config", "filter.boom.clean", "cat")
	writeFile(t, repo, "x.boom", "content\n")
	gitT(t, repo, "add", "x.boom")
	gitT(t, repo, "commit", "-q", "-m", "boom")
	// A required smudge filter that fails makes git fail mid-checkout,
	// after it created the branch.
	gitT(t, repo, "config", "filter.boom.smudge", "false")
	gitT(t, repo, "config", "filter.boom.required", "true")

	wt, err := m.Create(context.Background(), "s", repo, "")
	if err == nil {
		t.Fatalf("Create() with a failing checkout = %+v; want an error", wt)
	}
	var ge *GitError
	if !errors.As(err, &ge) || ge.ExitCode != 128 || !strings.Contains(ge.Stderr, "smudge filter boom failed") {
		t.Errorf("Create() error = %v; want a *GitError with exit code 128 and git's message", err)
	}
	path := filepath.Join(m.namespace(repo), "s")
	if exists(path) {
		t.Errorf("failed Create left %s", path)
	}
	if out := gitT(t, repo, "branch", "--list", "agentpool/*"); out != "" {
		t.Errorf("failed Create left branch %q", out)
	}
	if out := gitT(t, repo, "worktree", "list", "--porcelain"); strings.Contains(out, path) {
		t.Errorf("failed Create left a registration: %s", out)
	}
	gitT(t, repo, "config", "filter.boom.smudge", "cat")
	if _, err := m.Create(context.Background(), "s", repo, ""); err != nil {
		t.Errorf("Create() after fixing the filter error = %v; want success", err)
	}
}

func TestCreateCancelled(t *testing.T) {
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Create(ctx, "s", repo, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create() with a cancelled context error = %v; want context.Canceled", err)
	}
	if exists(filepath.Join(m.namespace(repo), "s")) {
		t.Errorf("cancelled Create left a directory")
	}
	create(t, m, "s", repo)
}
