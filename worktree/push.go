package worktree

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrRemoteMoved is returned (wrapped) by Push and Merge when the remote's
// ref is not at the value the caller expected: another host (or person)
// moved it, or this host lost the session. Nothing was overwritten.
var ErrRemoteMoved = errors.New("remote moved (fenced)")

// ErrNotMirrored is returned by Push and Continue for a repository that
// is not given by URL (a local checkout, which is not pushed).
var ErrNotMirrored = errors.New("repository is not given by URL")

// PushedRefPrefix prefixes the session id in the refs of a mirror that
// record what this host last pushed of the session (…/<session>/branch and
// …/<session>/checkpoint): LastPushed reads them.
const PushedRefPrefix = "refs/agentpool/pushed/"

// Lease is what the caller expects the remote to hold before a push: the
// values recorded under the owner's epoch. "" means the ref must not
// exist on the remote.
type Lease struct {
	// Branch is the expected commit of the session branch.
	Branch string `json:"branch"`
	// Checkpoint is the expected commit of the session's checkpoint ref
	// (CheckpointRefPrefix + session).
	Checkpoint string `json:"checkpoint"`
	// Fence, when set, is the lease this host holds of the session: the
	// push moves the session's fence on the remote with the refs, and is
	// refused when the fence names a later lease (see fence.go). Nil: no
	// fence (one host alone).
	Fence *Fence `json:"fence,omitempty"`
}

// Pushed is what the remote holds of a session after a push: the values
// of its branch and checkpoint ref ("" for a ref it does not have). It is
// the Lease of the next push.
type Pushed = Lease

// LastPushed returns what this host last pushed of wt's session (or
// fetched of it, by Continue), as recorded in the mirror; zero values
// when it pushed nothing. It is the Lease a single host passes to Push;
// a cluster passes the values its store recorded instead.
func (m *Manager) LastPushed(ctx context.Context, wt Worktree) (Lease, error) {
	if err := ValidSession(wt.Session); err != nil {
		return Lease{}, err
	}
	info, err := m.cachedRepo(ctx, wt.Repo)
	if err != nil {
		return Lease{}, err
	}
	if info.remote.url == "" {
		return Lease{}, fmt.Errorf("%w: %s", ErrNotMirrored, wt.Repo)
	}
	ids, err := m.resolve(ctx, repoAt(info), PushedRefPrefix+wt.Session+"/branch", PushedRefPrefix+wt.Session+"/checkpoint")
	if err != nil {
		return Lease{}, err
	}
	return Lease{Branch: ids[0], Checkpoint: ids[1]}, nil
}

// recordPushed records p as what the remote holds of session.
func (m *Manager) recordPushed(ctx context.Context, info repoInfo, session string, p Pushed) error {
	for _, r := range []struct{ name, id string }{{"branch", p.Branch}, {"checkpoint", p.Checkpoint}} {
		ref := PushedRefPrefix + session + "/" + r.name
		args := []string{"update-ref", "-m", "agentpool: pushed", ref, r.id}
		if r.id == "" {
			args = []string{"update-ref", "-d", ref}
		}
		if _, err := m.git(ctx, repoAt(info), args...); err != nil {
			return fmt.Errorf("record what was pushed: %w", err)
		}
	}
	return nil
}

// Push pushes the session branch of wt and its checkpoint ref from the
// mirror to the remote, in one atomic push, each with
// --force-with-lease=<ref>:<expected> where expected comes from lease. It
// returns what the remote now holds. Refs that already hold what the
// lease says are not pushed again; with nothing to push, Push runs no
// network command. A ref the remote holds at another value than expected
// refuses the whole push with an error wrapping ErrRemoteMoved, and
// nothing is overwritten. A session without a checkpoint yet pushes its
// branch alone. Other errors wrap ErrNotMirrored, ErrInvalidSession,
// ErrNotRepository or ErrMissing (no session branch in the mirror).
func (m *Manager) Push(ctx context.Context, wt Worktree, lease Lease) (Pushed, error) {
	if err := ValidSession(wt.Session); err != nil {
		return Pushed{}, err
	}
	info, err := m.cachedRepo(ctx, wt.Repo)
	if err != nil {
		return Pushed{}, err
	}
	if info.remote.url == "" {
		return Pushed{}, fmt.Errorf("%w: %s", ErrNotMirrored, wt.Repo)
	}
	// The agent's commits go with the branch.
	m.importFirst(ctx, wt)
	// The worktree's lock: no checkpoint moves the chain while it goes.
	st := m.state(wt.Path)
	st.mu.Lock()
	defer st.mu.Unlock()
	branch := "refs/heads/" + branchOf(wt)
	checkpoint := CheckpointRefPrefix + wt.Session
	ids, err := m.resolve(ctx, repoAt(info), branch, checkpoint)
	if err != nil {
		return Pushed{}, fmt.Errorf("push session %q: %w", wt.Session, err)
	}
	if ids[0] == "" {
		return Pushed{}, fmt.Errorf("push session %q: %w: no branch %s in the mirror of %s", wt.Session, ErrMissing, branchOf(wt), redactURL(info.remote.url))
	}
	now := Pushed{Branch: ids[0], Checkpoint: ids[1]}
	if now.Branch == lease.Branch && (now.Checkpoint == lease.Checkpoint || now.Checkpoint == "") {
		return Pushed{Branch: lease.Branch, Checkpoint: lease.Checkpoint}, nil
	}
	var updates []refPush
	for _, r := range []refPush{{branch, now.Branch, lease.Branch}, {checkpoint, now.Checkpoint, lease.Checkpoint}} {
		if r.local != "" && r.local != r.want {
			updates = append(updates, r)
		}
	}
	if err := m.pushFenced(ctx, info, wt.Session, lease.Fence, updates); err != nil {
		return Pushed{}, fmt.Errorf("push session %q: %w", wt.Session, err)
	}
	if err := m.recordPushed(ctx, info, wt.Session, now); err != nil {
		m.log.Warn("pushed, but not recorded", keySession, wt.Session, keyErr, err)
	}
	m.log.Debug("session pushed", keySession, wt.Session, keyRepo, redactURL(info.remote.url), keyBranch, now.Branch, keyCommit, now.Checkpoint)
	return now, nil
}

// staleRefs lists the refs a --porcelain push refused because the remote
// did not hold what the lease expected ("stale info"), or already holds
// something newer ("fetch first", "non-fast-forward").
func staleRefs(porcelain string) []string {
	var out []string
	for _, line := range strings.Split(porcelain, "\n") {
		if !strings.HasPrefix(line, "!\t") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) < 3 {
			continue
		}
		if strings.Contains(f[2], "stale info") || strings.Contains(f[2], "fetch first") || strings.Contains(f[2], "non-fast-forward") {
			_, dst, _ := strings.Cut(f[1], ":")
			out = append(out, dst)
		}
	}
	return out
}
