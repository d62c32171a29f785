package worktree

import (
	"context"
	"fmt"
	"strings"
)

// refPush is one ref a push updates: the remote's ref, the commit pushed
// to it, and the commit the remote must hold before ("" for none).
type refPush struct {
	ref, local, want string
}

// pushRefs pushes each update to info's remote in one atomic push, each
// with --force-with-lease on its expected value. A ref the remote holds at
// another value refuses the whole push with an error wrapping
// ErrRemoteMoved. The mirror's lock, or the worktree's, must be held.
func (m *Manager) pushRefs(ctx context.Context, info repoInfo, updates []refPush) error {
	args := append(append([]string{}, netConfig...), "push", "--porcelain", "--atomic", "--quiet")
	args = append(args, m.remoteProgram(info.remote, "--receive-pack", "receive-pack")...)
	var specs []string
	for _, u := range updates {
		args = append(args, "--force-with-lease="+u.ref+":"+u.want)
		specs = append(specs, u.local+":"+u.ref)
	}
	if len(specs) == 0 {
		return nil
	}
	if err := m.guardMirror(info); err != nil {
		return err
	}
	args = append(append(args, "--end-of-options", info.remote.url), specs...)
	out, err := m.run(ctx, call{at: at(info.top), args: args})
	if err == nil {
		return nil
	}
	if moved := staleRefs(string(out)); len(moved) > 0 {
		return fmt.Errorf("push to %s: %w: %s changed on the remote; nothing was overwritten", redactURL(info.remote.url), ErrRemoteMoved, strings.Join(moved, ", "))
	}
	return fmt.Errorf("push to %s: %w", redactURL(info.remote.url), err)
}

// pushMergeLocked pushes what Merge did in the mirror to the remote: the
// branch merged into, expected at the value the mirror fetched before the
// merge, and with opts.Lease the session branch. When the push is
// refused, the merged branch is put back in the mirror and the error
// wraps ErrRemoteMoved: the base moved since the fetch (merge again).
func (m *Manager) pushMergeLocked(ctx context.Context, info repoInfo, wt Worktree, opts MergeOptions, res MergeResult) error {
	var updates []refPush
	baseMoved := !res.Rebase && res.Head != res.Before
	if baseMoved {
		updates = append(updates, refPush{ref: res.Updated, local: res.Head, want: res.Before})
	}
	branch := "refs/heads/" + branchOf(wt)
	var tip string
	if opts.Lease != nil {
		ids, err := m.resolve(ctx, repoAt(info), branch)
		if err != nil {
			return err
		}
		if tip = ids[0]; tip != "" && tip != opts.Lease.Branch {
			updates = append(updates, refPush{ref: branch, local: tip, want: opts.Lease.Branch})
		}
	}
	var fence *Fence
	if opts.Lease != nil {
		fence = opts.Lease.Fence
	}
	if err := m.pushFenced(ctx, info, wt.Session, fence, updates); err != nil {
		if baseMoved {
			if _, uerr := m.git(context.WithoutCancel(ctx), repoAt(info), "update-ref", "-m", "agentpool: merge not pushed", res.Updated, res.Before, res.Head); uerr != nil {
				m.log.Warn("merge: put the merged branch back in the mirror", keyBranch, res.Updated, keyErr, uerr)
			}
		}
		what := "the session's work is on " + res.Branch + " in this host's mirror, but " + res.Into + " was not moved"
		return fmt.Errorf("%s: %w", what, err)
	}
	if opts.Lease != nil && tip != "" {
		rec := Pushed{Branch: tip, Checkpoint: opts.Lease.Checkpoint}
		if err := m.recordPushed(ctx, info, wt.Session, rec); err != nil {
			m.log.Warn("merge pushed, but not recorded", keySession, wt.Session, keyErr, err)
		}
	}
	return nil
}
