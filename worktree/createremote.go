package worktree

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// createFromRemote is Create for a repository given by URL (or as a bare
// repository's path): the mirror is made if this host has none and
// fetched, and the worktree is made from it. The setup file is read from
// the base commit, there being no main checkout.
func (m *Manager) createFromRemote(ctx context.Context, session string, r remote, baseRef string) (Worktree, error) {
	if m.mirrors == "" {
		return Worktree{}, fmt.Errorf("%w: %s: this Manager has no mirror root for repositories given by URL", ErrBareRepository, redactURL(r.url))
	}
	lock := m.repoLock(m.mirrorDir(r.url))
	lock.Lock()
	defer lock.Unlock()
	info, err := m.ensureMirrorLocked(ctx, r)
	if err != nil {
		return Worktree{}, err
	}
	branch := BranchPrefix + session
	ids, err := m.resolve(ctx, at(info.top), baseRef+"^{commit}", "refs/heads/"+branch, baseRef+"^{commit}^{tree}")
	if err != nil {
		return Worktree{}, fmt.Errorf("create worktree for session %q: %w", session, err)
	}
	base := ids[0]
	if base == "" {
		err := fmt.Errorf("%w: %q is not a commit in %s", ErrUnknownRef, baseRef, redactURL(r.url))
		if baseRef == "HEAD" {
			return Worktree{}, &userError{msg: "the repository " + redactURL(r.url) + " has no default branch with a commit: push one first, or give a base", err: err}
		}
		return Worktree{}, &userError{msg: fmt.Sprintf("%q is not a branch, tag or commit of %s", baseRef, redactURL(r.url)), err: err}
	}
	if ids[1] != "" {
		return Worktree{}, fmt.Errorf("%w: branch %s already exists in the mirror of %s", ErrExists, branch, redactURL(r.url))
	}
	setup, hasSetup, err := m.setupFileFor(ctx, info, base)
	if err != nil {
		return Worktree{}, err
	}
	return m.addLocked(ctx, session, info, base, ids[2], setup, hasSetup)
}

// setupFileFor reads the setup file of the repository info: from the
// main checkout's working tree, or for a mirror from commit (default: the
// mirror's HEAD), there being no main checkout.
func (m *Manager) setupFileFor(ctx context.Context, info repoInfo, commit string) (SetupFile, bool, error) {
	if info.remote.url == "" {
		return m.loadSetupFile(info.top)
	}
	if commit == "" {
		commit = "HEAD"
	}
	if err := validRev(commit); err != nil {
		return SetupFile{}, false, err
	}
	data, file, ok, err := m.readCommittedSetup(ctx, info, commit)
	if err != nil || !ok {
		return SetupFile{}, ok, err
	}
	sf, err := m.setupFileOf(info.remote.url, file, data)
	return sf, true, err
}

// readCommittedSetup reads the setup file at the top of commit's tree in
// the mirror: a regular file (not a symbolic link) of at most
// maxSetupFile bytes; ok is false when there is none.
func (m *Manager) readCommittedSetup(ctx context.Context, info repoInfo, commit string) (data []byte, file string, ok bool, err error) {
	ids, err := m.resolve(ctx, repoAt(info), commit+"^{commit}")
	if err != nil {
		return nil, "", false, err
	}
	if ids[0] == "" {
		return nil, "", false, fmt.Errorf("%w: %q is not a commit of %s", ErrUnknownRef, commit, redactURL(info.remote.url))
	}
	short := ids[0][:12]
	file = SetupFileName + " of " + redactURL(info.remote.url) + " at " + short
	out, err := m.git(ctx, repoAt(info), "ls-tree", "-z", "--long", ids[0], "--", SetupFileName)
	if err != nil {
		return nil, file, true, fmt.Errorf("%w: %s: %w", ErrSetupConfig, file, err)
	}
	if out == "" {
		return nil, file, false, nil
	}
	// <mode> SP <type> SP <object> SP* <size> TAB <name> NUL
	meta, _, _ := strings.Cut(out, "\t")
	f := strings.Fields(meta)
	if len(f) != 4 {
		return nil, file, true, fmt.Errorf("%w: %s: unexpected ls-tree output %q", ErrSetupConfig, file, out)
	}
	switch {
	case f[0] == "120000":
		return nil, file, true, fmt.Errorf("%w: %s is a symbolic link: it is not followed; make it a regular file", ErrSetupConfig, file)
	case f[1] != "blob":
		return nil, file, true, fmt.Errorf("%w: %s is not a regular file", ErrSetupConfig, file)
	}
	if size, err := strconv.ParseInt(f[3], 10, 64); err != nil || size > maxSetupFile {
		return nil, file, true, fmt.Errorf("%w: %s is larger than %d bytes", ErrSetupConfig, file, maxSetupFile)
	}
	blob, err := m.run(ctx, call{at: repoAt(info), args: []string{"cat-file", "blob", f[2]}})
	if err != nil {
		return nil, file, true, fmt.Errorf("%w: %s: %w", ErrSetupConfig, file, err)
	}
	return blob, file, true, nil
}

// noCopyEvent is the SetupCopied event of a setup whose repository has no
// main checkout: its copy list is refused, path by path; the command (if
// any) still runs.
func noCopyEvent(s Setup, url string) SetupEvent {
	why := "the repository " + redactURL(url) + " is given by URL: there is no main checkout to copy from"
	ev := SetupEvent{Kind: SetupCopied, File: s.File, Copied: []string{},
		Error: "copy refused: " + why + " (commit what a worktree needs, or make it in the setup command)"}
	for _, p := range s.Copy {
		ev.Skipped = append(ev.Skipped, SkippedCopy{Path: p, Reason: why})
	}
	return ev
}
