package worktree

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestHiddenByChangedIgnoreRules: an agent that writes a .gitignore of
// "*" during a turn, and files beside it, does not make the turn look
// empty: the .gitignore is in the turn's diff (although it ignores
// itself), and the diff lists the files it hides with the rule. Files
// ignored by the repository's own rules are not reported.
func TestHiddenByChangedIgnoreRules(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", map[string]string{".gitignore": "*.log\n", "README.md": "hi\n"})
	wt := create(t, m, "s", repo)
	writeFile(t, wt.Path, "build.log", "ignored by the repository's own rule\n")
	before, err := m.Checkpoint(ctx, wt)
	must(t, err)

	writeFile(t, wt.Path, "sub/.gitignore", "*\n")
	writeFile(t, wt.Path, "sub/secret.txt", "hidden work\n")
	writeFile(t, wt.Path, "sub/deep/more.txt", "more hidden work\n")
	after, err := m.Checkpoint(ctx, wt)
	must(t, err)
	if after == before {
		t.Fatalf("Checkpoint() after writing a self-ignoring .gitignore = %s, the same as before; want the .gitignore in the snapshot", after)
	}
	d, err := m.Diff(ctx, wt, before, after)
	must(t, err)
	var paths []string
	for _, f := range d.Files {
		paths = append(paths, f.Path)
	}
	if !cmp.Equal(paths, []string{"sub/.gitignore"}) {
		t.Errorf("Diff().Files = %q; want [sub/.gitignore]", paths)
	}
	want := []HiddenFile{{Path: "sub/deep/", Rule: "sub/.gitignore:1:*"}, {Path: "sub/secret.txt", Rule: "sub/.gitignore:1:*"}}
	if diff := cmp.Diff(want, d.Hidden); diff != "" || d.HiddenCount != 2 {
		t.Errorf("Diff().Hidden (count %d) mismatch (-want +got):\n%s", d.HiddenCount, diff)
	}

	// The live diff of the whole session says the same.
	live, err := m.Diff(ctx, wt, "", "")
	must(t, err)
	if live.HiddenCount != 2 {
		t.Errorf("Diff(live).HiddenCount = %d (%+v); want 2", live.HiddenCount, live.Hidden)
	}

	// A session that changed no ignore rule reports nothing hidden.
	wt2 := create(t, m, "s2", repo)
	writeFile(t, wt2.Path, "other.log", "x\n")
	d2, err := m.Diff(ctx, wt2, "", "")
	must(t, err)
	if d2.HiddenCount != 0 || d2.Hidden != nil {
		t.Errorf("Diff() of a session that changed no ignore rule: hidden %+v; want none", d2.Hidden)
	}
}
