package worktree

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const renameBody = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n"

// roundTripFiles are the committed files of the round-trip tests.
var roundTripFiles = map[string]string{
	"keep.txt":       "keep\n",
	"mod.txt":        "line1\nline2\nline3\n",
	"del.txt":        "delete me\n",
	"rename-src.txt": renameBody,
	"bin.dat":        "\x00\x01\x02binary\x00data\xff",
	"script.sh":      "#!/bin/sh\necho hi\n",
	".gitignore":     "*.log\nbuild/\n",
	"sub/nested.txt": "nested\n",
}

// fileState is what a test compares of one file.
type fileState struct {
	Mode    fs.FileMode
	ModTime time.Time
	Content string
}

// snapshotFiles records every file of dir except .git.
func snapshotFiles(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	files := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".git" {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fileState{Mode: info.Mode(), ModTime: info.ModTime()}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			st.Content, _ = os.Readlink(p)
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			st.Content = string(b)
		}
		files[filepath.ToSlash(rel)] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// gitState is HEAD, the index file and git's view of the worktree.
type gitState struct {
	Head, Status, Index string
	IndexTime           time.Time
}

func readGitState(t *testing.T, wt Worktree) gitState {
	t.Helper()
	index := filepath.Join(gitPathsT(t, wt).AdminDir, "index")
	info, err := os.Stat(index)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(index)
	// --no-optional-locks: the test's own status must not rewrite the index.
	return gitState{
		Head:      gitT(t, wt.Path, "rev-parse", "HEAD") + " " + gitT(t, wt.Path, "symbolic-ref", "HEAD"),
		Status:    gitT(t, wt.Path, "--no-optional-locks", "status", "--porcelain", "--ignored", "--untracked-files=all"),
		Index:     string(b),
		IndexTime: info.ModTime(),
	}
}

// changeEverything applies one of each kind of change to the worktree.
func changeEverything(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, dir, "mod.txt", "line1\nline2 changed\nline3\nline4\n")
	must(t, os.Remove(filepath.Join(dir, "del.txt")))
	must(t, os.MkdirAll(filepath.Join(dir, "renamed"), 0o755))
	must(t, os.Rename(filepath.Join(dir, "rename-src.txt"), filepath.Join(dir, "renamed", "dst.txt")))
	writeFile(t, dir, "bin.dat", "\x00\x01\x02BINARY\x00changed\xfe")
	must(t, os.Chmod(filepath.Join(dir, "script.sh"), 0o755))
	writeFile(t, dir, "new dir/new.txt", "new\n")
	must(t, os.Symlink("keep.txt", filepath.Join(dir, "link.txt")))
	writeFile(t, dir, "staged.txt", "staged by the agent\n")
	gitT(t, dir, "add", "staged.txt")
	writeFile(t, dir, "debug.log", "ignored v2\n")
	writeFile(t, dir, "build/new.o", "object\n")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointDiffRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", roundTripFiles)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "debug.log", "ignored v1\n")
	writeFile(t, wt.Path, "build/out.o", "ignored\n")

	c0, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	if base := gitT(t, repo, "rev-parse", wt.BaseCommit+"^{tree}"); c0 != base {
		t.Errorf("Checkpoint() of a clean worktree = %s; want the base tree %s (ignored files excluded)", c0, base)
	}

	changeEverything(t, wt.Path)
	filesBefore, gitBefore := snapshotFiles(t, wt.Path), readGitState(t, wt)
	time.Sleep(10 * time.Millisecond) // so that a rewrite would show in mtimes
	c1, err := m.Checkpoint(ctx, wt)
	if err != nil {
		t.Fatalf("Checkpoint() error = %v", err)
	}
	if diff := cmp.Diff(filesBefore, snapshotFiles(t, wt.Path)); diff != "" {
		t.Errorf("Checkpoint() touched files (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(gitBefore, readGitState(t, wt)); diff != "" {
		t.Errorf("Checkpoint() touched HEAD or the index (-before +after):\n%s", diff)
	}
	if again, err := m.Checkpoint(ctx, wt); err != nil || again != c1 {
		t.Errorf("second Checkpoint() = %s, %v; want the same tree %s", again, err, c1)
	}
	if got := gitT(t, repo, "ls-tree", "-r", "--name-only", c1); strings.Contains(got, ".log") || strings.Contains(got, "build/") {
		t.Errorf("checkpoint holds ignored files:\n%s", got)
	}

	wantFiles := []FileChange{
		{Path: "bin.dat", Status: StatusModified, OldMode: "100644", NewMode: "100644", Binary: true},
		{Path: "del.txt", Status: StatusDeleted, OldMode: "100644", Deletions: 1},
		{Path: "link.txt", Status: StatusAdded, NewMode: "120000", Additions: 1},
		{Path: "mod.txt", Status: StatusModified, OldMode: "100644", NewMode: "100644", Additions: 2, Deletions: 1},
		{Path: "new dir/new.txt", Status: StatusAdded, NewMode: "100644", Additions: 1},
		{Path: "renamed/dst.txt", OldPath: "rename-src.txt", Status: StatusRenamed, OldMode: "100644", NewMode: "100644", Similarity: 100},
		{Path: "script.sh", Status: StatusModified, OldMode: "100644", NewMode: "100755"},
		{Path: "staged.txt", Status: StatusAdded, NewMode: "100644", Additions: 1},
	}
	d, err := m.Diff(ctx, wt, c0, c1)
	if err != nil {
		t.Fatalf("Diff(c0, c1) error = %v", err)
	}
	if diff := cmp.Diff(wantFiles, d.Files); diff != "" {
		t.Errorf("Diff(c0, c1).Files (-want +got):\n%s", diff)
	}
	if want := (Stat{Files: 8, Additions: 5, Deletions: 2}); d.Stat != want {
		t.Errorf("Diff(c0, c1).Stat = %+v; want %+v", d.Stat, want)
	}
	if d.From != c0 || d.To != c1 || d.Truncated {
		t.Errorf("Diff(c0, c1) from %s to %s truncated %v; want %s to %s, complete", d.From, d.To, d.Truncated, c0, c1)
	}
	for _, want := range []string{
		"diff --git a/mod.txt b/mod.txt", "-line2\n+line2 changed\n", "rename from rename-src.txt\nrename to renamed/dst.txt",
		"old mode 100644\nnew mode 100755", "Binary files a/bin.dat and b/bin.dat differ", "deleted file mode 100644",
		"new file mode 120000", "+++ b/new dir/new.txt",
	} {
		if !strings.Contains(d.Patch, want) {
			t.Errorf("Diff(c0, c1).Patch lacks %q:\n%s", want, d.Patch)
		}
	}
	live, err := m.Diff(ctx, wt, c0, "")
	if err != nil {
		t.Fatalf("Diff(c0, live) error = %v", err)
	}
	if diff := cmp.Diff(d, live); diff != "" {
		t.Errorf("Diff(c0, live) differs from Diff(c0, c1) (-c1 +live):\n%s", diff)
	}
	session, err := m.Diff(ctx, wt, "", "")
	if err != nil {
		t.Fatalf("Diff(base, live) error = %v", err)
	}
	if diff := cmp.Diff(d.Files, session.Files); diff != "" {
		t.Errorf("Diff(base, live).Files differs from the turn's (-turn +session):\n%s", diff)
	}

	headBefore := gitT(t, wt.Path, "rev-parse", "HEAD")
	if err := m.Restore(ctx, wt, c0); err != nil {
		t.Fatalf("Restore(c0) error = %v", err)
	}
	if got, err := m.Checkpoint(ctx, wt); err != nil || got != c0 {
		t.Errorf("Checkpoint() after Restore(c0) = %s, %v; want %s", got, err, c0)
	}
	for _, gone := range []string{"new dir", "renamed", "link.txt", "staged.txt"} {
		if exists(filepath.Join(wt.Path, gone)) {
			t.Errorf("after Restore(c0) %s exists; want it removed", gone)
		}
	}
	for name, want := range roundTripFiles {
		if got := readFile(t, wt.Path, name); got != want {
			t.Errorf("after Restore(c0) %s = %q; want %q", name, got, want)
		}
	}
	if info, _ := os.Stat(filepath.Join(wt.Path, "script.sh")); info.Mode()&0o111 != 0 {
		t.Errorf("after Restore(c0) script.sh mode = %v; want not executable", info.Mode())
	}
	if got := readFile(t, wt.Path, "debug.log"); got != "ignored v2\n" {
		t.Errorf("after Restore(c0) ignored debug.log = %q; want untouched %q", got, "ignored v2\n")
	}
	if !exists(filepath.Join(wt.Path, "build", "new.o")) || !exists(filepath.Join(wt.Path, "build", "out.o")) {
		t.Errorf("after Restore(c0) ignored build/ files were removed")
	}
	if got := gitT(t, wt.Path, "rev-parse", "HEAD"); got != headBefore {
		t.Errorf("Restore moved HEAD from %s to %s", headBefore, got)
	}
	if got := gitT(t, wt.Path, "status", "--porcelain"); got != "" {
		t.Errorf("status after Restore(c0) = %q; want clean (the undone staging reset too)", got)
	}

	if err := m.Restore(ctx, wt, c1); err != nil {
		t.Fatalf("Restore(c1) error = %v", err)
	}
	if got, err := m.Checkpoint(ctx, wt); err != nil || got != c1 {
		t.Errorf("Checkpoint() after Restore(c1) = %s, %v; want %s", got, err, c1)
	}
	if info, _ := os.Stat(filepath.Join(wt.Path, "script.sh")); info.Mode()&0o111 == 0 {
		t.Errorf("after Restore(c1) script.sh mode = %v; want executable", info.Mode())
	}
	if target, err := os.Readlink(filepath.Join(wt.Path, "link.txt")); err != nil || target != "keep.txt" {
		t.Errorf("after Restore(c1) link.txt -> %q, %v; want a symlink to keep.txt", target, err)
	}
	if got := readFile(t, wt.Path, "renamed/dst.txt"); got != renameBody {
		t.Errorf("after Restore(c1) renamed/dst.txt = %q; want %q", got, renameBody)
	}
}

func TestCheckpointAnchored(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "a.txt", "first\n")
	c1, err := m.Checkpoint(ctx, wt)
	must(t, err)
	writeFile(t, wt.Path, "a.txt", "second\n")
	c2, err := m.Checkpoint(ctx, wt)
	must(t, err)
	if _, err := m.Checkpoint(ctx, wt); err != nil {
		t.Fatal(err)
	}
	// A second Manager (a restarted daemon) continues the same chain.
	m2, err := NewManager(Config{Root: m.Root()})
	must(t, err)
	writeFile(t, wt.Path, "a.txt", "third\n")
	c3, err := m2.Checkpoint(ctx, wt)
	must(t, err)

	ref := CheckpointRefPrefix + "s"
	if got := gitT(t, repo, "log", "--format=%T", ref); got != strings.Join([]string{c3, c2, c1}, "\n") {
		t.Errorf("checkpoint chain trees = %q; want %s, %s, %s (no duplicate for an unchanged state)", got, c3, c2, c1)
	}
	if got := gitT(t, repo, "log", "-1", "--format=%an <%ae>", ref); got != DefaultAuthor+" <"+DefaultAuthorEmail+">" {
		t.Errorf("checkpoint author = %q; want the Manager's identity", got)
	}
	gitT(t, repo, "gc", "--quiet", "--prune=now")
	if _, err := gitRaw(repo, nil, "cat-file", "-e", c1); err != nil {
		t.Errorf("checkpoint %s was pruned by git gc", c1)
	}
	must(t, m.Restore(ctx, wt, c1))
	if got := readFile(t, wt.Path, "a.txt"); got != "first\n" {
		t.Errorf("after gc and Restore(c1) a.txt = %q; want %q", got, "first\n")
	}
	// The state the restore replaced is anchored too.
	if got := gitT(t, repo, "log", "-1", "--format=%T", ref); got != c3 {
		t.Errorf("chain head after Restore = %s; want the replaced state %s", got, c3)
	}
}

func TestRestoreNeverOverwritesIgnored(t *testing.T) {
	tests := []struct {
		name     string
		agent    string // file the agent wrote before the checkpoint
		ignored  string // what is ignored afterwards (info/exclude)
		precious string // ignored file written afterwards in its way
	}{
		{"same path", "out.txt", "out.txt", "out.txt"},
		{"ignored file in place of a directory", "gen/x.txt", "gen", "gen"},
		{"ignored directory in place of a file", "cache", "cache/", "cache/data.bin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			m := newManager(t)
			repo := newRepo(t, "repo", map[string]string{"mod.txt": "v1\n"})
			wt := create(t, m, "s", repo)
			writeFile(t, wt.Path, tt.agent, "from the agent\n")
			ca, err := m.Checkpoint(ctx, wt)
			must(t, err)
			must(t, os.RemoveAll(filepath.Join(wt.Path, strings.Split(tt.agent, "/")[0])))
			writeFile(t, repo, ".git/info/exclude", tt.ignored+"\n")
			writeFile(t, wt.Path, tt.precious, "precious, ignored\n")
			writeFile(t, wt.Path, "mod.txt", "v2\n")

			if err := m.Restore(ctx, wt, ca); err == nil || !strings.Contains(err.Error(), tt.agent) {
				t.Fatalf("Restore over an ignored file error = %v; want one naming %s", err, tt.agent)
			}
			if got := readFile(t, wt.Path, tt.precious); got != "precious, ignored\n" {
				t.Errorf("ignored %s = %q; want untouched", tt.precious, got)
			}
			if got := readFile(t, wt.Path, "mod.txt"); got != "v2\n" {
				t.Errorf("mod.txt = %q; want the failed Restore to change nothing", got)
			}
		})
	}
}

func TestCheckpointErrors(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	gone := wt
	gone.Path = filepath.Join(filepath.Dir(wt.Path), "gone")
	gone.Session = "gone"
	c, err := m.Checkpoint(ctx, wt)
	must(t, err)

	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"checkpoint missing", func() error { _, err := m.Checkpoint(ctx, gone); return err }, ErrMissing},
		{"diff missing", func() error { _, err := m.Diff(ctx, gone, "", ""); return err }, ErrMissing},
		{"restore missing", func() error { return m.Restore(ctx, gone, c) }, ErrMissing},
		{"restore unknown", func() error { return m.Restore(ctx, wt, strings.Repeat("ab", 20)) }, ErrUnknownRef},
		{"restore option", func() error { return m.Restore(ctx, wt, "--hard") }, ErrUnknownRef},
		{"diff unknown from", func() error { _, err := m.Diff(ctx, wt, "nope", ""); return err }, ErrUnknownRef},
		{"diff unknown to", func() error { _, err := m.Diff(ctx, wt, c, "nope"); return err }, ErrUnknownRef},
		{"diff without base", func() error {
			w := wt
			w.BaseCommit = ""
			_, err := m.Diff(ctx, w, "", "")
			return err
		}, ErrUnknownRef},
		{"invalid session", func() error {
			w := wt
			w.Session = "../x"
			_, err := m.Checkpoint(ctx, w)
			return err
		}, ErrInvalidSession},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, tt.want) {
				t.Fatalf("%s error = %v; want %v", tt.name, err, tt.want)
			}
		})
	}
	for _, dir := range []string{gitPathsT(t, wt).AdminDir, m.tmpDir} {
		if left, _ := filepath.Glob(filepath.Join(dir, "agentpool-index-*")); len(left) != 0 {
			t.Errorf("temporary indexes left behind: %v", left)
		}
	}
}

func TestDiffTruncated(t *testing.T) {
	ctx := context.Background()
	m, err := NewManager(Config{Root: t.TempDir(), MaxPatchBytes: 300})
	must(t, err)
	repo := newRepo(t, "repo", nil)
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "big.txt", strings.Repeat("a line of text\n", 200))
	writeFile(t, wt.Path, "other.txt", "x\n")
	d, err := m.Diff(ctx, wt, "", "")
	must(t, err)
	if !d.Truncated || len(d.Patch) > 300 || !strings.HasSuffix(d.Patch, "\n") {
		t.Errorf("Diff() patch of %d bytes, truncated %v; want at most 300 bytes cut at a line end", len(d.Patch), d.Truncated)
	}
	if d.Stat != (Stat{Files: 2, Additions: 201}) || len(d.Files) != 2 {
		t.Errorf("Diff().Stat = %+v with %d files; want the full stat despite truncation", d.Stat, len(d.Files))
	}
}

func TestDiffUnchanged(t *testing.T) {
	m := newManager(t)
	wt := create(t, m, "s", newRepo(t, "repo", nil))
	d, err := m.Diff(context.Background(), wt, "", "")
	if err != nil || d.Files == nil || len(d.Files) != 0 || d.Patch != "" || d.Stat != (Stat{}) || d.From != d.To {
		t.Errorf("Diff() of an unchanged worktree = %+v, %v; want an empty, non-nil file list", d, err)
	}
}
