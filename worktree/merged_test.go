package worktree

import (
	"context"
	"strings"
	"testing"
)

// TestPruneDeletesASquashMergedBranch: a squash merge leaves the session
// branch no ancestor of its target, yet its work is there; Prune deletes
// it, unless it moved on after the merge.
func TestPruneDeletesASquashMergedBranch(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		moveOn   bool
		wantKept string
	}{
		{"merged", false, ""},
		{"moved on after the merge", true, KeptHasCommits},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t)
			repo := newRepo(t, "repo", nil)
			wt := create(t, m, "s", repo)
			writeFile(t, wt.Path, "a.txt", "work\n")
			res, err := m.Merge(ctx, wt, MergeOptions{Into: "main", Squash: true})
			if err != nil || res.Method != MergeSquash {
				t.Fatalf("Merge(squash) = %+v, %v; want a squash", res, err)
			}
			if tt.moveOn {
				writeFile(t, wt.Path, "b.txt", "more work, never merged\n")
			}
			rm, err := m.Remove(ctx, wt, false)
			if err != nil || rm.Committed != tt.moveOn {
				t.Fatalf("Remove() = %+v, %v; want committed = %v", rm, err, tt.moveOn)
			}
			pr, err := m.Prune(ctx, wt, PruneOptions{})
			if err != nil {
				t.Fatalf("Prune() error = %v", err)
			}
			if pr.BranchKept != tt.wantKept || pr.BranchDeleted != (tt.wantKept == "") || pr.Merged == tt.moveOn {
				t.Errorf("Prune() = %+v; want kept %q", pr, tt.wantKept)
			}
			if got := branchTip(t, repo, "agentpool/s") != ""; got != tt.moveOn {
				t.Errorf("branch exists after Prune = %v; want %v", got, tt.moveOn)
			}
			if out, _ := gitRaw(repo, nil, "for-each-ref", MergedRefPrefix); out != "" {
				t.Errorf("refs left under %s: %s", MergedRefPrefix, out)
			}
		})
	}
}

// TestSessionWorkIsAuthoredAsTheUser: the commits of a session's work
// (kept at close, committed before a merge) carry the identity the
// repository's configuration gives, with trailers naming the session and
// its agent.
func TestSessionWorkIsAuthoredAsTheUser(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	repo := newRepo(t, "repo", nil)
	gitT(t, repo, "config", "user.name", "Jane Doe")
	gitT(t, repo, "config", "user.email", "jane@example.com")
	wt := create(t, m, "s", repo)
	wt.Agent = "claude"
	const wantTrailers = "Agentpool-Session: s\nAgentpool-Agent: claude"

	writeFile(t, wt.Path, "a.txt", "merged work\n")
	res, err := m.Merge(ctx, wt, MergeOptions{Into: "main"})
	if err != nil || !res.Committed {
		t.Fatalf("Merge() = %+v, %v; want the work committed", res, err)
	}
	writeFile(t, wt.Path, "b.txt", "work left at close\n")
	rm, err := m.Remove(ctx, wt, false)
	if err != nil || !rm.Committed {
		t.Fatalf("Remove() = %+v, %v; want the work committed", rm, err)
	}
	for what, commit := range map[string]string{"merge's work commit": res.WorkCommit, "close's commit": rm.Commit} {
		if got := gitT(t, repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", commit); got != "Jane Doe <jane@example.com>|Jane Doe <jane@example.com>" {
			t.Errorf("%s author|committer = %q; want the user's", what, got)
		}
		if got := gitT(t, repo, "log", "-1", "--format=%(trailers:key=Agentpool-Session,key=Agentpool-Agent,only)", commit); strings.TrimSpace(got) != wantTrailers {
			t.Errorf("%s trailers = %q; want %q", what, got, wantTrailers)
		}
	}
}
