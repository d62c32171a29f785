package worktree

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pushes fenced by the remote. When several hosts share a session's
// repository, the host that holds the session's lease is the only one
// that may push it; a host that lost the lease (it was frozen, cut off,
// or slow) must not overwrite what the new owner pushed, even when it
// pushes after the loss. Checking the lease before pushing leaves a
// window (a host stopped between the check and the push), so the remote
// itself checks: each session has a fence ref there
// (FenceRefPrefix+session), a chain of empty commits whose messages name
// the host and the lease's epoch that wrote them. A new owner first moves
// the fence to its epoch (ClaimFence), expecting the value it read, and
// only if the fence names an older epoch; every push of the session then
// moves the fence one commit further in the same atomic push as the
// session's refs, with --force-with-lease on the value this host wrote.
// A stale host's push expects a fence value that is no longer there, and
// the remote refuses the whole push: nothing of it lands.

// FenceRefPrefix prefixes the session id in the ref that fences the
// session's pushes, on its remote (and in the mirror, the value this
// host last wrote or read).
const FenceRefPrefix = "refs/agentpool/fence/"

// fenceSeenPrefix is where the mirror keeps a fence it fetched to read.
const fenceSeenPrefix = "refs/agentpool/fence-seen/"

// Fence names the holder of a session's lease: its host and the lease's
// epoch, which grows at each change of owner. A push that carries a
// Fence (Lease.Fence) lands only while the remote's fence names it.
type Fence struct {
	Host  string `json:"host"`
	Epoch int64  `json:"epoch"`
}

// String is how a fence names itself in messages.
func (f Fence) String() string { return fmt.Sprintf("host %s at epoch %d", f.Host, f.Epoch) }

// fenceState is what this host knows of one session's fence on its
// remote.
type fenceState struct {
	mu    sync.Mutex
	fence Fence  // what the remote's fence names, as last written or read
	oid   string // the remote's fence commit, "" when unknown
}

// fenceOf returns the fence state of session.
func (m *Manager) fenceOf(session string) *fenceState {
	v, _ := m.fences.LoadOrStore(session, &fenceState{})
	return v.(*fenceState)
}

// fenceTries bounds the compare-and-swaps of a claim that other claims
// keep beating.
const fenceTries = 5

// ClaimFence moves the fence of session on the remote of repo (a URL, or
// the repository of one of this host's worktrees) to f, the lease this
// host now holds: at a take-over, before anything else of the session,
// so that the previous owner's pushes are refused from then on. It moves
// it only from an older epoch (a compare-and-swap on the value it read);
// a fence already at f is kept. It returns what the remote holds of the
// session's branch (branch, "" for BranchPrefix+session) and checkpoint
// once fenced. A fence at a later epoch (another host took the session
// since) is an error wrapping ErrRemoteMoved. A repository that is not
// given by URL is ErrNotMirrored.
func (m *Manager) ClaimFence(ctx context.Context, session, repo, branch string, f Fence) (Pushed, error) {
	if err := ValidSession(session); err != nil {
		return Pushed{}, err
	}
	if f.Host == "" || f.Epoch <= 0 {
		return Pushed{}, fmt.Errorf("claim the fence of session %q: a host and an epoch are required", session)
	}
	info, err := m.sessionMirror(ctx, repo)
	if err != nil {
		return Pushed{}, err
	}
	if branch == "" {
		branch = BranchPrefix + session
	}
	fs := m.fenceOf(session)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := m.claimLocked(ctx, info, session, f, fs); err != nil {
		return Pushed{}, err
	}
	return m.listSession(ctx, info, session, branch)
}

// sessionMirror returns the mirror of repo: a URL's (made if need be), or
// the repository of a worktree.
func (m *Manager) sessionMirror(ctx context.Context, repo string) (repoInfo, error) {
	if IsURL(repo) {
		r, err := m.remoteFor(ctx, repo)
		if err != nil {
			return repoInfo{}, err
		}
		if m.mirrors == "" {
			return repoInfo{}, fmt.Errorf("%w: this Manager has no mirror root", ErrNotMirrored)
		}
		lock := m.repoLock(m.mirrorDir(r.url))
		lock.Lock()
		defer lock.Unlock()
		return m.ensureMirrorLocked(ctx, r)
	}
	info, err := m.cachedRepo(ctx, repo)
	if err != nil {
		return repoInfo{}, err
	}
	if info.remote.url == "" {
		return repoInfo{}, fmt.Errorf("%w: %s", ErrNotMirrored, repo)
	}
	return info, nil
}

// listSession lists what the remote holds of the session's branch and
// checkpoint ref.
func (m *Manager) listSession(ctx context.Context, info repoInfo, session, branch string) (Pushed, error) {
	refs, err := m.lsRemote(ctx, info, "refs/heads/"+branch, CheckpointRefPrefix+session)
	if err != nil {
		return Pushed{}, err
	}
	return Pushed{Branch: refs["refs/heads/"+branch], Checkpoint: refs[CheckpointRefPrefix+session]}, nil
}

// lsRemote returns the values the remote holds of refs (absent: none).
func (m *Manager) lsRemote(ctx context.Context, info repoInfo, refs ...string) (map[string]string, error) {
	r := info.remote
	args := append(append([]string{}, netConfig...), "ls-remote")
	args = append(args, m.remoteProgram(r, "--upload-pack", "upload-pack")...)
	out, err := m.git(ctx, at(info.top), append(append(args, "--end-of-options", r.url), refs...)...)
	if err != nil {
		return nil, fmt.Errorf("list refs of %s: %w", redactURL(r.url), err)
	}
	got := map[string]string{}
	for _, line := range splitLines(out) {
		if id, ref, ok := cutTab(line); ok {
			got[ref] = id
		}
	}
	return got, nil
}

// claimLocked moves the remote's fence of session to f (see ClaimFence).
// fs.mu is held.
func (m *Manager) claimLocked(ctx context.Context, info repoInfo, session string, f Fence, fs *fenceState) error {
	ref := FenceRefPrefix + session
	for try := 0; ; try++ {
		refs, err := m.lsRemote(ctx, info, ref)
		if err != nil {
			return fmt.Errorf("claim the fence of session %q: %w", session, err)
		}
		cur := refs[ref]
		if cur != "" {
			var now Fence
			if cur == fs.oid {
				now = fs.fence
			} else if now, err = m.readRemoteFence(ctx, info, session, cur); err != nil {
				return fmt.Errorf("claim the fence of session %q: %w", session, err)
			}
			switch {
			case now == f:
				fs.fence, fs.oid = f, cur
				return m.keepFence(ctx, info, session, cur)
			case now.Epoch >= f.Epoch:
				fs.fence, fs.oid = now, cur
				return fmt.Errorf("push session %q: %w: its fence on %s names %s, after this host's epoch %d",
					session, ErrRemoteMoved, redactURL(info.remote.url), now, f.Epoch)
			}
		}
		next, err := m.fenceCommit(ctx, info, session, f, cur)
		if err != nil {
			return err
		}
		err = m.pushRefs(ctx, info, []refPush{{ref: ref, local: next, want: cur}})
		if err == nil {
			fs.fence, fs.oid = f, next
			m.log.Info("session's remote fence moved to this host", keySession, session, "epoch", f.Epoch, keyRepo, redactURL(info.remote.url))
			return m.keepFence(ctx, info, session, next)
		}
		if !errors.Is(err, ErrRemoteMoved) || try+1 >= fenceTries {
			fs.oid = ""
			return fmt.Errorf("claim the fence of session %q: %w", session, err)
		}
	}
}

// readRemoteFence fetches the remote's fence commit oid of session and
// reads whom it names.
func (m *Manager) readRemoteFence(ctx context.Context, info repoInfo, session, oid string) (Fence, error) {
	if ids, err := m.resolve(ctx, repoAt(info), oid+"^{commit}"); err != nil || ids[0] == "" {
		r := info.remote
		args := append(append([]string{}, netConfig...), "fetch", "--quiet", "--no-write-fetch-head", "--no-auto-gc")
		args = append(args, m.remoteProgram(r, "--upload-pack", "upload-pack")...)
		spec := "+" + FenceRefPrefix + session + ":" + fenceSeenPrefix + session
		if _, err := m.git(ctx, at(info.top), append(args, "--end-of-options", r.url, spec)...); err != nil {
			return Fence{}, fmt.Errorf("fetch the fence from %s: %w", redactURL(r.url), err)
		}
	}
	msg, err := m.git(ctx, repoAt(info), "cat-file", "commit", oid)
	if err != nil {
		return Fence{}, fmt.Errorf("read the fence %s: %w", oid, err)
	}
	f, ok := parseFence(msg)
	if !ok {
		return Fence{}, fmt.Errorf("the fence %s of session %q names no host and epoch", oid, session)
	}
	return f, nil
}

// keepFence records oid as the session's fence in the mirror, where it
// stays reachable (the parent of the next one).
func (m *Manager) keepFence(ctx context.Context, info repoInfo, session, oid string) error {
	if _, err := m.git(ctx, repoAt(info), "update-ref", "-m", "agentpool: fence", FenceRefPrefix+session, oid); err != nil {
		return fmt.Errorf("record the fence of session %q: %w", session, err)
	}
	return nil
}

// fenceCommit makes the next fence commit of session, naming f, after
// parent ("" for the first).
func (m *Manager) fenceCommit(ctx context.Context, info repoInfo, session string, f Fence, parent string) (string, error) {
	out, err := m.run(ctx, call{at: repoAt(info), args: []string{"mktree"}, stdin: strings.NewReader("")})
	if err != nil {
		return "", fmt.Errorf("fence of session %q: %w", session, err)
	}
	args := []string{"commit-tree", strings.TrimSpace(string(out))}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	args = append(args, "-m", "agentpool fence of session "+session, "-m",
		fmt.Sprintf("Session: %s\nHost: %s\nEpoch: %d\nWritten: %s", session, f.Host, f.Epoch, time.Now().UTC().Format(time.RFC3339Nano)))
	id, err := m.git(ctx, repoAt(info), args...)
	if err != nil {
		return "", fmt.Errorf("fence of session %q: %w", session, err)
	}
	return id, nil
}

// parseFence reads the host and epoch a fence commit (cat-file's form)
// names.
func parseFence(commit string) (Fence, bool) {
	var f Fence
	var host, epoch bool
	_, msg, _ := strings.Cut(commit, "\n\n")
	for _, line := range strings.Split(msg, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		switch {
		case !ok:
		case k == "Host":
			f.Host, host = v, true
		case k == "Epoch":
			n, err := strconv.ParseInt(v, 10, 64)
			f.Epoch, epoch = n, err == nil
		}
	}
	return f, host && epoch && f.Host != ""
}

// pushFenced pushes updates of session's refs to info's remote as
// pushRefs does; with a fence, the session's fence moves one commit
// further in the same atomic push, expected at the value this host wrote
// (claimed first when this host has not written it at f yet). A fence
// that moved on the remote (another host holds the session) refuses the
// whole push with an error wrapping ErrRemoteMoved.
func (m *Manager) pushFenced(ctx context.Context, info repoInfo, session string, f *Fence, updates []refPush) error {
	if f == nil || len(updates) == 0 {
		return m.pushRefs(ctx, info, updates)
	}
	fs := m.fenceOf(session)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.oid == "" || fs.fence != *f {
		if err := m.claimLocked(ctx, info, session, *f, fs); err != nil {
			return err
		}
	}
	next, err := m.fenceCommit(ctx, info, session, *f, fs.oid)
	if err != nil {
		return err
	}
	err = m.pushRefs(ctx, info, append(updates, refPush{ref: FenceRefPrefix + session, local: next, want: fs.oid}))
	if err != nil {
		// Read the remote's fence again before the next push: it may have
		// moved (the session is another host's), or only a ref of the
		// session did.
		fs.oid = ""
		return err
	}
	fs.oid = next
	if err := m.keepFence(ctx, info, session, next); err != nil {
		m.log.Warn("pushed, but the fence not recorded in the mirror", keySession, session, keyErr, err)
	}
	return nil
}

// TreeOf returns the tree of commit in the mirror of repo (a URL, or the
// repository of one of this host's worktrees).
func (m *Manager) TreeOf(ctx context.Context, repo, commit string) (string, error) {
	if err := validRev(commit); err != nil {
		return "", err
	}
	info, err := m.sessionMirror(ctx, repo)
	if err != nil {
		return "", err
	}
	ids, err := m.resolve(ctx, repoAt(info), commit+"^{tree}")
	if err != nil {
		return "", err
	}
	if ids[0] == "" {
		return "", fmt.Errorf("%w: %s is not a commit of %s", ErrUnknownRef, commit, repo)
	}
	return ids[0], nil
}
