package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A mirror is a bare repository in Config.MirrorRoot that this host keeps
// of a remote. Its configuration is the Manager's own: no remote is
// configured in it (every fetch and push names the URL), it never holds
// credentials, and git runs on it with the same -c overrides as on any
// repository (no hooks, no fsmonitor, no pager or editor programs). An
// agent may read it (its worktree's git directories are in it) and write
// its objects and its session's branch, as with a local repository, but
// never its config or hooks. Fetches take the remote's branches (less the
// sessions' own, agentpool/*, which this host owns) and tags; the
// sessions' branches and checkpoints go back by Push.

// netConfig are the -c options of every git command that talks to a
// remote: only the file, ssh and https transports (no ext:: or fd::
// helpers, no git://), and no submodules fetched.
var netConfig = []string{
	"-c", "protocol.allow=never",
	"-c", "protocol.file.allow=always",
	"-c", "protocol.ssh.allow=always",
	"-c", "protocol.https.allow=always",
	"-c", "fetch.recurseSubmodules=false",
	"-c", "submodule.recurse=false",
	"-c", "transfer.fsckObjects=true",
}

// remoteProgram is the --upload-pack or --receive-pack option of a command
// that talks to r: for a remote on this host's disk, git runs that program
// itself on the remote repository, whose hooks and fsmonitor (its config)
// must not run as the daemon, so it gets the Manager's empty hooks
// directory; for ssh and https the remote's server runs what it runs.
func (m *Manager) remoteProgram(r remote, opt, sub string) []string {
	if !r.local {
		return nil
	}
	prog := strings.Join([]string{
		shellQuote(m.gitPath),
		"-c", shellQuote("core.hooksPath=" + m.hooksDir),
		"-c", "core.fsmonitor=false",
		"-c", "core.alternateRefsCommand=true",
		sub,
	}, " ")
	return []string{opt + "=" + prog}
}

// mirrorInfo locates the existing mirror of r. Without a mirror root it
// is an error wrapping ErrBareRepository; without a mirror, one wrapping
// ErrNotRepository.
func (m *Manager) mirrorInfo(r remote) (repoInfo, error) {
	if m.mirrors == "" {
		return repoInfo{}, fmt.Errorf("%w: %s: this Manager has no mirror root for repositories given by URL", ErrBareRepository, redactURL(r.url))
	}
	dir := m.mirrorDir(r.url)
	if _, err := os.Stat(dir); err != nil {
		return repoInfo{}, &userError{msg: "this host has no mirror of " + redactURL(r.url) + " (a session made from it here fetches it)",
			err: fmt.Errorf("%w: no mirror of %s: %w", ErrNotRepository, redactURL(r.url), err)}
	}
	return repoInfo{top: dir, common: dir, remote: r}, nil
}

// ensureMirrorLocked makes the mirror of r if there is none and fetches
// it. The lock of the mirror's directory must be held.
func (m *Manager) ensureMirrorLocked(ctx context.Context, r remote) (repoInfo, error) {
	if m.mirrors == "" {
		return repoInfo{}, fmt.Errorf("%w: %s: this Manager has no mirror root for repositories given by URL", ErrBareRepository, redactURL(r.url))
	}
	dir := m.mirrorDir(r.url)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := m.initMirror(ctx, dir); err != nil {
			return repoInfo{}, fmt.Errorf("make the mirror of %s: %w", redactURL(r.url), err)
		}
		m.log.Info("mirror created", keyRepo, redactURL(r.url), keyPath, dir)
	} else if err != nil {
		return repoInfo{}, fmt.Errorf("mirror of %s: %w", redactURL(r.url), err)
	}
	info := repoInfo{top: dir, common: dir, remote: r}
	if err := m.fetchLocked(ctx, info); err != nil {
		return repoInfo{}, err
	}
	return info, nil
}

// initMirror makes an empty bare repository at dir, in a temporary
// directory renamed into place, so that a half-made mirror is never used.
// No template is copied (no sample hooks, no description).
func (m *Manager) initMirror(ctx context.Context, dir string) error {
	if err := os.MkdirAll(m.mirrors, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(m.mirrors, ".init-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := m.git(ctx, wtLoc{}, "init", "--quiet", "--bare", "--template=", "--", tmp); err != nil {
		return err
	}
	// Reflogs, as in a checkout's .git: the session branch's log
	// directory exists from its worktree's creation, so that the agent's
	// own git can update the branch (a sandbox grants only what exists).
	if _, err := m.git(ctx, at(tmp), "config", "core.logAllRefUpdates", "true"); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// guardMirror removes what an agent may have planted in the mirror's
// objects directory (which it may write, as in a checkout's .git) to
// make the daemon's fetches and pushes read objects from elsewhere: an
// alternates file would let a commit on the agent's branch name objects
// of another repository on this host, which a push would then send to
// the remote. The daemon never makes one in a mirror.
func (m *Manager) guardMirror(info repoInfo) error {
	for _, name := range []string{"alternates", "http-alternates"} {
		p := filepath.Join(info.common, "objects", "info", name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		m.log.Warn("mirror: removed an objects/info file the daemon never makes (an agent planted it?)", keyPath, p)
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// fetchLocked fetches the remote's branches (but the sessions' own) and
// tags into the mirror, and points the mirror's HEAD at the remote's. The
// mirror's lock must be held.
func (m *Manager) fetchLocked(ctx context.Context, info repoInfo) error {
	r := info.remote
	if err := m.guardMirror(info); err != nil {
		return err
	}
	// --update-head-ok: a branch an agent checked out in its worktree
	// (git checkout main) must not stop every fetch of the mirror.
	args := append(append([]string{}, netConfig...), "fetch", "--quiet", "--no-write-fetch-head", "--no-auto-gc", "--update-head-ok")
	args = append(args, m.remoteProgram(r, "--upload-pack", "upload-pack")...)
	args = append(args, "--end-of-options", r.url,
		"+refs/heads/*:refs/heads/*", "^refs/heads/"+BranchPrefix+"*", "+refs/tags/*:refs/tags/*")
	if _, err := m.git(ctx, at(info.top), args...); err != nil {
		return fmt.Errorf("fetch %s: %w", redactURL(r.url), err)
	}
	args = append(append([]string{}, netConfig...), "ls-remote", "--symref")
	args = append(args, m.remoteProgram(r, "--upload-pack", "upload-pack")...)
	out, err := m.git(ctx, at(info.top), append(args, "--end-of-options", r.url, "HEAD")...)
	if err != nil {
		return fmt.Errorf("read the HEAD of %s: %w", redactURL(r.url), err)
	}
	for _, line := range strings.Split(out, "\n") {
		ref, ok := strings.CutPrefix(line, "ref: ")
		if !ok {
			continue
		}
		ref, _, _ = strings.Cut(ref, "\t")
		if !strings.HasPrefix(ref, "refs/heads/") || validRev(ref) != nil {
			break
		}
		if _, err := m.git(ctx, at(info.top), "symbolic-ref", "HEAD", ref); err != nil {
			return fmt.Errorf("point the mirror's HEAD at %s: %w", ref, err)
		}
		break
	}
	return nil
}

// Fetch fetches the mirror of the repository repo (a URL, or a bare
// repository's path) from its remote, making it if this host has none.
// Create fetches by itself; Fetch is for a base that is not there yet.
// Errors wrap ErrInvalidURL, ErrNotRepository, or ErrBareRepository
// (this Manager has no mirror root).
func (m *Manager) Fetch(ctx context.Context, repo string) error {
	r, err := m.remoteFor(ctx, repo)
	if err != nil {
		return err
	}
	lock := m.repoLock(m.mirrorDir(r.url))
	lock.Lock()
	defer lock.Unlock()
	_, err = m.ensureMirrorLocked(ctx, r)
	return err
}

// remoteFor returns the remote repo names: a URL, or the path of a bare
// repository (one that is not bare is an error wrapping ErrNotRepository).
func (m *Manager) remoteFor(ctx context.Context, repo string) (remote, error) {
	if r, ok, err := remoteOf(repo); ok {
		return r, err
	}
	_, err := m.localRepo(ctx, repo)
	if err == nil {
		return remote{}, fmt.Errorf("%w: %s is a checkout, not a repository given by URL", ErrNotRepository, repo)
	}
	if !errors.Is(err, ErrBareRepository) {
		return remote{}, err
	}
	abs, _ := filepath.Abs(repo)
	return bareRemote(abs), nil
}

// Mirrored reports whether the repository of worktrees made from repo is
// a mirror of a remote (repo is a URL or a bare repository's path), whose
// sessions' work is pushed (see Push). It answers from a cache after the
// first call for repo.
func (m *Manager) Mirrored(ctx context.Context, repo string) bool {
	if IsURL(repo) {
		return true
	}
	info, err := m.cachedRepo(ctx, repo)
	return err == nil && info.remote.url != ""
}
