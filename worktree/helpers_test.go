package worktree

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Every git call of this package's tests, the Manager's included, runs
	// without global or system configuration and without an identity, as on
	// a fresh CI machine: the Manager must bring its own.
	os.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	os.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, k := range []string{"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"} {
		os.Unsetenv(k)
	}
	goleak.VerifyTestMain(m)
}

// testIdentity is the identity of commits the tests themselves make.
var testIdentity = []string{
	"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=test@example.com",
	"GIT_COMMITTER_NAME=Test Author", "GIT_COMMITTER_EMAIL=test@example.com",
	"GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_CONFIG_NOSYSTEM=1",
}

// gitT runs git in dir for the test, which fails if git does.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitRaw(dir, nil, args...)
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSuffix(out, "\n")
}

// gitRaw runs git in dir with stdin and returns its combined output.
func gitRaw(dir string, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), testIdentity...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// writeFile writes content to dir/name, creating parents.
func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFile returns the content of dir/name, or "<missing>".
func readFile(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if os.IsNotExist(err) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exists reports whether path exists.
func exists(path string) bool { return lexists(path) }

// gitPathsT returns the git directories of wt as a fresh Manager finds
// them, without the cache of the one that made it.
func gitPathsT(t testing.TB, wt Worktree) GitPaths {
	t.Helper()
	common := gitT(t, wt.Repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
	common, err := filepath.EvalSymlinks(common)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := findAdmin(common, wt.Path)
	if err != nil {
		t.Fatal(err)
	}
	return GitPaths{CommonDir: common, AdminDir: admin, Branch: branchOf(wt)}
}

// newRepo makes a repository in a new directory named name under a temp
// dir, with files committed on main, and returns its path.
func newRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.EvalSymlinks(dir)
	gitT(t, dir, "init", "-q", "-b", "main")
	if len(files) == 0 {
		files = map[string]string{"README.md": "hello\n"}
	}
	for name, content := range files {
		writeFile(t, dir, name, content)
	}
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// newManager returns a Manager rooted in a new temp dir.
func newManager(t testing.TB) *Manager {
	t.Helper()
	m, err := NewManager(Config{
		Root:      filepath.Join(t.TempDir(), "worktrees"),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		TrustFile: filepath.Join(t.TempDir(), "trusted.json"),
	})
	if err != nil {
		t.Fatalf("NewManager() error = %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// create makes a worktree or fails the test.
func create(t testing.TB, m *Manager, session, repo string) Worktree {
	t.Helper()
	wt, err := m.Create(context.Background(), session, repo, "")
	if err != nil {
		t.Fatalf("Create(%q, %q) error = %v", session, repo, err)
	}
	return wt
}
