package worktree

import (
	"context"
	"strings"
)

// The commits Merge makes, and what it records of a merge.

// commitAs makes a commit of tree with parents and message paragraphs
// msg, with the user's identity (see userIdentity): the merge is theirs.
func (m *Manager) commitAs(ctx context.Context, l wtLoc, tree string, parents, msg []string) (string, error) {
	args := []string{"commit-tree", tree}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	for _, p := range msg {
		args = append(args, "-m", p)
	}
	out, err := m.run(ctx, call{at: l, args: args, env: m.userIdentity(ctx, l)})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// userIdentity returns the environment that makes a commit the user's:
// the user.name and user.email that git's configuration gives in l (the
// repository's, the user's global one), or nil, the Manager's own
// identity, when either is missing.
func (m *Manager) userIdentity(ctx context.Context, l wtLoc) []string {
	name, email, ok := m.configIdentity(ctx, l)
	if !ok {
		return nil
	}
	return []string{"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email, "GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email}
}

// commitsBetween lists the commits of to that from lacks, newest first,
// at most maxMergeCommits, and how many more there are.
func (m *Manager) commitsBetween(ctx context.Context, l wtLoc, from, to string) ([]Commit, int, error) {
	out, err := m.git(ctx, l, "log", "--no-decorate", "--format=%H %s", from+".."+to, "--")
	if err != nil {
		return nil, 0, err
	}
	commits := []Commit{}
	more := 0
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			continue
		}
		if len(commits) == maxMergeCommits {
			more++
			continue
		}
		id, subject, _ := strings.Cut(line, " ")
		commits = append(commits, Commit{ID: id, Subject: subject})
	}
	return commits, more, nil
}

// recordMerged records the session branch's head, now merged, at
// MergedRefPrefix+session, so that Prune knows the branch holds nothing
// more (a squash merge is no ancestor of it). A failure is logged: the
// merge is done, and Prune then keeps the branch.
func (m *Manager) recordMerged(ctx context.Context, ms mergeState, wt Worktree) {
	if _, err := m.git(ctx, ms.repo, "update-ref", "-m", "agentpool: merged session "+wt.Session, MergedRefPrefix+wt.Session, ms.work.tip); err != nil {
		m.log.Warn("record the merged head of a session branch", keySession, wt.Session, keyCommit, ms.work.tip, keyErr, err)
	}
}
