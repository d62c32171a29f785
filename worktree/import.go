package worktree

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// importTimeout bounds one import of an agent's history: a hostile
// agent's huge or pathological objects are refused, not waited for.
const importTimeout = 2 * time.Minute

// ImportResult says what ImportAgentHistory did.
type ImportResult struct {
	// Branch is the session branch.
	Branch string `json:"branch"`
	// Private is the commit the agent's private ref named ("" when it
	// named none).
	Private string `json:"private,omitempty"`
	// Before and After are the branch's tip before and after the import.
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Imported is true when the branch was fast-forwarded to Private.
	Imported bool `json:"imported,omitempty"`
	// Commits counts the commits the import added to the branch.
	Commits int `json:"commits,omitempty"`
	// Refused is why the agent's history was not imported, one of the
	// Refused values; "" when it was, or when there was nothing to
	// import. Detail says more. The branch is then unchanged; the
	// worktree's files, and so the session's checkpoints and the commit
	// that keeps its work, still hold what the agent did.
	Refused string `json:"refused,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// Reasons of a refused import, in ImportResult.Refused.
const (
	// RefusedBadRef: the private ref is not a commit id (a symbolic ref,
	// a symlink, garbage, a tree).
	RefusedBadRef = "the agent's branch names no commit"
	// RefusedNoBranch: the session branch is gone from the repository.
	RefusedNoBranch = "the session branch is gone"
	// RefusedUnverified: the agent's objects could not be brought in
	// verified: one is missing or corrupt, fails git fsck, or the work
	// took longer than the import's bound.
	RefusedUnverified = "the agent's objects failed verification"
	// RefusedNotFastForward: the agent's branch does not contain the
	// session branch (it reset, amended or rebased what was imported).
	// Its objects, verified, are in the repository all the same, named
	// by nothing but the worktree's own records.
	RefusedNotFastForward = "the agent's branch is not a fast-forward"
)

// ImportAgentHistory brings the commits an agent made on its session
// branch in its private git view (see view.go) into the repository: when
// the private ref names a commit the branch does not contain, the objects
// the agent added are fetched, verified, from the view into the
// repository, and the branch is fast-forwarded to it with a
// compare-and-swap. Nothing is imported when the private ref is empty,
// equal to the branch or behind it (as it stays where no view is mounted
// and the agent's git writes the real branch). A refused import (see
// ImportResult.Refused) leaves the branch as it is and is not an error.
// A worktree without a view imports nothing.
//
// The Manager imports on its own at the start of every operation that
// reads or moves the session branch; this runs one now. Errors are those
// of git or the disk, and ErrInvalidSession or ErrNotRepository.
func (m *Manager) ImportAgentHistory(ctx context.Context, wt Worktree) (ImportResult, error) {
	if err := ValidSession(wt.Session); err != nil {
		return ImportResult{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return ImportResult{}, fmt.Errorf("import agent history: worktree path %q is not absolute", wt.Path)
	}
	info, err := m.repo(ctx, wt.Repo)
	if err != nil {
		return ImportResult{}, err
	}
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()
	st := m.state(wt.Path)
	st.mu.Lock()
	defer st.mu.Unlock()
	return m.importLocked(ctx, info, wt, st, true)
}

// importFirst imports the agent's history before an operation that
// takes neither lock itself (Checkpoint, Diff, Restore, Push): at once
// when the private ref is the one the Manager last dealt with (read from
// the view's file, without git), else under the repository's lock and
// the worktree's. Failures are logged: the operation goes on with the
// branch as it is.
func (m *Manager) importFirst(ctx context.Context, wt Worktree) {
	if _, err := m.ImportChanged(ctx, wt); err != nil {
		m.log.Warn("import the agent's commits", keySession, wt.Session, keyErr, err)
	}
}

// ImportChanged is ImportAgentHistory when the agent's private ref moved
// since the Manager last dealt with it, and nothing (a zero result, no
// git run) otherwise: what a turn's end calls, to say what became of the
// agent's own commits.
func (m *Manager) ImportChanged(ctx context.Context, wt Worktree) (ImportResult, error) {
	v := m.viewOf(wt.Path, branchOf(wt))
	if !v.Set() {
		return ImportResult{}, nil
	}
	st := m.state(wt.Path)
	cur, rerr := privateRef(v)
	st.mu.Lock()
	seen := st.viewRef
	st.mu.Unlock()
	if refKey(cur, rerr) == seen {
		return ImportResult{}, nil
	}
	info, err := m.cachedRepo(ctx, wt.Repo)
	if err != nil {
		return ImportResult{}, err
	}
	lock := m.repoLock(info.common)
	lock.Lock()
	defer lock.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	return m.importLocked(ctx, info, wt, st, false)
}

// importLocked is ImportAgentHistory with the repository's lock and
// st.mu held. Unless force, a private ref equal to the one last dealt
// with (st.viewRef) is not looked at again.
func (m *Manager) importLocked(ctx context.Context, info repoInfo, wt Worktree, st *wtState, force bool) (ImportResult, error) {
	branch := branchOf(wt)
	res := ImportResult{Branch: branch}
	v := m.viewOf(wt.Path, branch)
	if !v.Set() {
		return res, nil
	}
	raw, rerr := privateRef(v)
	key := refKey(raw, rerr)
	if !force && key == st.viewRef {
		return res, nil
	}
	if rerr == nil && raw == "" {
		st.viewRef = key // the agent deleted its branch: nothing to bring in
		return res, nil
	}
	repo := repoAt(info)
	ids, err := m.resolve(ctx, repo, "refs/heads/"+branch)
	if err != nil {
		return res, fmt.Errorf("import the agent's commits: %w", err)
	}
	tip := ids[0]
	res.Before, res.After = tip, tip
	refuse := func(why, detail string) (ImportResult, error) {
		res.Refused, res.Detail = why, detail
		if st.viewRef != key || force {
			m.log.Warn("agent's commits not imported", keySession, wt.Session, keyBranch, branch,
				"private", raw, keyCommit, tip, "refused", why, "detail", detail)
		}
		st.viewRef = key
		return res, nil
	}
	switch {
	case rerr != nil:
		return refuse(RefusedBadRef, rerr.Error())
	case !isObjectName(raw):
		return refuse(RefusedBadRef, fmt.Sprintf("its ref holds %q", raw))
	}
	res.Private = raw
	switch {
	case tip == "":
		return refuse(RefusedNoBranch, "no "+branch+" in "+redactURL(info.name()))
	case raw == tip:
		st.viewRef = key
		return res, nil
	}
	// Behind the branch (no view mounted, or nothing new since the last
	// import or export): only a commit the repository already has can be.
	if behind, err := m.isAncestor(ctx, repo, raw, tip); err == nil && behind {
		st.viewRef = key
		return res, nil
	} else if ctx.Err() != nil {
		return res, fmt.Errorf("import the agent's commits: %w", context.Cause(ctx))
	}
	ictx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	why, detail, n, err := m.bringIn(ictx, info, v, raw, tip, func() error {
		_, err := m.git(ctx, repo, "update-ref", "-m", "agentpool: import the agent's commits", "refs/heads/"+branch, raw, tip)
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return res, fmt.Errorf("import the agent's commits: %w", context.Cause(ctx))
	case err != nil && ictx.Err() != nil:
		return refuse(RefusedUnverified, fmt.Sprintf("not done within %s", importTimeout))
	case err != nil:
		return res, fmt.Errorf("import the agent's commits: %w", err)
	case why != "":
		return refuse(why, detail)
	}
	res.Imported, res.After, res.Commits = true, raw, n
	st.viewRef = key
	m.log.Info("agent's commits imported", keySession, wt.Session, keyBranch, branch, keyCommit, raw, "commits", n, "from", tip)
	return res, nil
}

// bringIn fetches commit want and what it needs from the view v into the
// repository info, verified, and when it fast-forwards tip, runs move
// (which moves the branch). It returns why it refused (a Refused value,
// and a detail), or the number of commits brought in.
//
// The objects come through a quarantine: the fetch writes them into a
// directory of the repository's object store that git does not read
// (GIT_OBJECT_DIRECTORY, the store itself as an alternate), as
// receive-pack does, and they join the store only once the fetch has
// verified them all; one that fails verification leaves nothing in the
// store.
//
// Why a rewritten object is never accepted: the source repository
// (see stageView) holds only the loose objects and packs the agent added,
// with the real store as its alternate; git fetch sends a pack of what
// want needs that the repository does not have, and index-pack names each
// object it receives by the hash of its content, with fsck on every
// object. An object the agent rewrote under an id the repository has is
// never sent (the repository has it), and is left out of the source
// anyway; one sent under a forged id arrives under its real id, so a
// commit or tree that names the forged id misses it and the fetch fails.
func (m *Manager) bringIn(ctx context.Context, info repoInfo, v GitView, want, tip string, move func() error) (why, detail string, commits int, err error) {
	src, err := m.stageView(v, info.common, want)
	if errors.Is(err, errTooManyObjects) {
		return RefusedUnverified, err.Error(), 0, nil
	}
	if err != nil {
		return "", "", 0, err
	}
	defer src.remove()
	q, err := newQuarantine(filepath.Join(info.common, "objects"))
	if err != nil {
		return "", "", 0, err
	}
	defer q.remove()
	repo := repoAt(info)
	_, err = m.run(ctx, call{at: repo, env: q.env(), args: []string{
		"-c", "fetch.fsckObjects=true", "-c", "transfer.fsckObjects=true",
		"-c", "protocol.file.allow=always", "-c", "fetch.writeCommitGraph=false",
		"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules",
		"--negotiation-tip=" + tip, "--end-of-options", src.dir, importRef,
	}})
	if err != nil {
		if ctx.Err() != nil {
			return "", "", 0, err
		}
		return RefusedUnverified, gitDetail(err), 0, nil
	}
	// Verified, complete and well-formed: the objects join the store even
	// if the branch does not move, so that the worktree's own records
	// (its HEAD's reflog, its index), which git gc and fsck walk, name
	// objects the repository has.
	if err := q.migrate(); err != nil {
		return "", "", 0, err
	}
	out, err := m.git(ctx, repo, "cat-file", "-t", want)
	if err != nil {
		return "", "", 0, err
	}
	if out != "commit" {
		return RefusedBadRef, "it names a " + out, 0, nil
	}
	if ff, err := m.isAncestor(ctx, repo, tip, want); err != nil {
		return "", "", 0, err
	} else if !ff {
		return RefusedNotFastForward, fmt.Sprintf("%s does not contain the branch's %s", want, tip), 0, nil
	}
	out, err = m.git(ctx, repo, "rev-list", "--count", want, "^"+tip)
	if err != nil {
		return "", "", 0, err
	}
	if commits, err = strconv.Atoi(out); err != nil {
		return "", "", 0, fmt.Errorf("count the agent's commits: %w", err)
	}
	if err := move(); err != nil {
		return "", "", 0, err
	}
	return "", "", commits, nil
}

// gitDetail is the first lines of what git said of a failure.
func gitDetail(err error) string {
	var ge *GitError
	if errors.As(err, &ge) && ge.Stderr != "" {
		lines := strings.Split(strings.TrimSpace(ge.Stderr), "\n")
		if len(lines) > 3 {
			lines = lines[:3]
		}
		return strings.Join(lines, "; ")
	}
	return err.Error()
}
