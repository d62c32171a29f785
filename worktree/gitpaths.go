package worktree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// An agent may write its worktree (the .git file included) and its
// worktree's admin directory (the commondir and gitdir files included), so
// nothing the Manager runs git on is located through them: the common
// directory comes from the user's repository (wt.Repo), the admin directory
// from the entries of <common>/worktrees whose gitdir names the worktree,
// and every git call in a worktree gets its repository, work tree and index
// explicitly (see wtLoc).

// GitPaths locates the git directories of a session worktree, as the
// Manager computes them from the repository it was created from, never from
// the worktree's .git file or the admin directory's commondir file.
type GitPaths struct {
	// CommonDir is the repository's common git directory (the main
	// checkout's .git), absolute, symlinks resolved.
	CommonDir string
	// AdminDir is the worktree's private git directory,
	// CommonDir/worktrees/<id>.
	AdminDir string
	// Branch is the session branch, e.g. "agentpool/<session>"; its ref is
	// CommonDir/refs/heads/<Branch> (see RefDir and LogDir).
	Branch string
	// View is the worktree's private git view, which a mount namespace
	// shows its agent in place of the shared object store and ref
	// directory (see view.go); zero when the worktree has none.
	View GitView
}

// RefDir returns the directory holding the session branch's loose ref
// file: CommonDir/refs/heads plus the branch name's directory part.
func (p GitPaths) RefDir() string {
	return filepath.Dir(filepath.Join(p.CommonDir, "refs", "heads", filepath.FromSlash(p.Branch)))
}

// LogDir returns the directory holding the session branch's reflog:
// CommonDir/logs/refs/heads plus the branch name's directory part.
func (p GitPaths) LogDir() string {
	return filepath.Dir(filepath.Join(p.CommonDir, "logs", "refs", "heads", filepath.FromSlash(p.Branch)))
}

// located is a worktree's GitPaths as cached in its wtState, with the
// repository they were computed from.
type located struct {
	GitPaths
	repo string
}

// wtLoc is where a git command runs: the user's repository (only dir set;
// git discovers the repository from it), or a session worktree with its
// repository, work tree and index all given explicitly (see open).
//
// A worktree's admin directory is never GIT_DIR: the agent can write it,
// and git takes from it more than GIT_COMMON_DIR overrides: the ref store
// follows its commondir file, and config.worktree (with
// extensions.worktreeConfig), info/sparse-checkout and HEAD are read from
// it. So git runs on the common directory itself, with the worktree as
// GIT_WORK_TREE and its index (a file of data, read but never obeyed) as
// GIT_INDEX_FILE; the worktree's HEAD is read by headOf.
type wtLoc struct {
	dir    string // -C directory
	gitDir string // GIT_DIR: the common dir
	common string // GIT_COMMON_DIR
	work   string // GIT_WORK_TREE; "" for none
	index  string // GIT_INDEX_FILE; "" for none
	admin  string // the worktree's admin dir, never given to git as such
}

// at is the location of a git command run in the user's repository dir.
func at(dir string) wtLoc { return wtLoc{dir: dir} }

// worktreeLoc is the location of git commands in the worktree at path.
func worktreeLoc(path, admin, common string) wtLoc {
	return wtLoc{dir: path, gitDir: common, common: common, work: path, index: filepath.Join(admin, "index"), admin: admin}
}

// repo returns the location of git commands that need no work tree: the
// common directory alone.
func (l wtLoc) repo() wtLoc {
	return wtLoc{dir: l.common, gitDir: l.common, common: l.common}
}

// env returns the environment that pins git to the worktree's real
// repository; nil for a repository location. A call's own environment
// (a temporary GIT_INDEX_FILE) comes after it and wins.
func (l wtLoc) env() []string {
	if l.gitDir == "" {
		return nil
	}
	env := []string{"GIT_DIR=" + l.gitDir, "GIT_COMMON_DIR=" + l.common}
	if l.work != "" {
		env = append(env, "GIT_WORK_TREE="+l.work)
	}
	if l.index != "" {
		env = append(env, "GIT_INDEX_FILE="+l.index)
	}
	return env
}

// maxGitFile bounds what is read of a gitdir or .git file.
const maxGitFile = 4096

// readGitFile reads a small regular file without following a symlink or
// blocking on a FIFO an agent put in its place.
func readGitFile(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxGitFile))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// gitdirOf returns the absolute directory a gitdir-style file names: the
// worktree's ".git" file ("gitdir: <dir>") or an admin directory's "gitdir"
// file ("<worktree>/.git"); relative paths are relative to base.
func gitdirOf(content, base string) string {
	content = strings.TrimPrefix(content, "gitdir: ")
	if content == "" {
		return ""
	}
	if !filepath.IsAbs(content) {
		content = filepath.Join(base, content)
	}
	return filepath.Clean(content)
}

// findAdmin returns the admin directory of the worktree at path among the
// real entries of common/worktrees: the one whose gitdir file names
// path/.git. An agent can write its own admin directory's gitdir, so when
// several claim path, the one the worktree's .git file names wins (a
// forgery then needs the agents of both worktrees); otherwise it is an
// error.
func findAdmin(common, path string) (string, error) {
	dir := filepath.Join(common, "worktrees")
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("find admin dir of %s: %w", path, err)
	}
	want := filepath.Join(path, ".git")
	var matches []string
	for _, e := range ents {
		if !e.IsDir() { // a symlink is not followed
			continue
		}
		admin := filepath.Join(dir, e.Name())
		g, err := readGitFile(filepath.Join(admin, "gitdir"))
		if err != nil || gitdirOf(g, admin) != want {
			continue
		}
		matches = append(matches, admin)
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("%s is not a worktree of the repository at %s (no %s/*/gitdir names it)", path, common, dir)
	case 1:
		return matches[0], nil
	}
	if g, err := readGitFile(want); err == nil {
		hint := gitdirOf(g, path)
		for _, a := range matches {
			if a == hint {
				return a, nil
			}
		}
	}
	return "", fmt.Errorf("%s is claimed by several admin dirs of %s: %v", path, common, matches)
}

// cachedRepo returns repo's repoInfo, computed once per repository path.
func (m *Manager) cachedRepo(ctx context.Context, repo string) (repoInfo, error) {
	key := filepath.Clean(repo)
	m.mu.Lock()
	info, ok := m.repoInfos[key]
	m.mu.Unlock()
	if ok {
		return info, nil
	}
	info, err := m.repo(ctx, repo)
	if err != nil {
		return repoInfo{}, err
	}
	m.rememberRepo(key, info)
	return info, nil
}

// rememberRepo caches info for the repository path repo.
func (m *Manager) rememberRepo(repo string, info repoInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.repoInfos[filepath.Clean(repo)] = info
}

// forgetRepo drops the cached repoInfo of repo.
func (m *Manager) forgetRepo(repo string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.repoInfos, filepath.Clean(repo))
}

// GitPaths returns the git directories of the session worktree wt, for a
// sandbox to grant: computed from wt.Repo (git rev-parse in the user's
// repository) and the gitdir files under its common directory, never from
// the worktree's .git file or the admin directory's commondir file. The
// result is cached per worktree: later calls for the same wt run no git.
// They look on disk for the view's directory (View is zero when it is
// missing), and make the directories the view is mounted on (RefDir and
// LogDir) when git removed them, as it does with an empty one. It does
// not check that the worktree still exists.
//
// Errors wrap ErrInvalidSession, ErrNotRepository or ErrBareRepository,
// or say that git does not know wt.Path as a worktree of wt.Repo.
func (m *Manager) GitPaths(ctx context.Context, wt Worktree) (GitPaths, error) {
	p, err := m.locate(ctx, wt)
	if err != nil {
		return GitPaths{}, err
	}
	if p.View = m.viewOf(wt.Path, p.Branch); p.View.Set() {
		for _, d := range []string{p.RefDir(), p.LogDir()} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return GitPaths{}, fmt.Errorf("the mount point of the private git view: %w", err)
			}
		}
	}
	return p, nil
}

// locate is GitPaths: the cached or freshly computed paths of wt.
func (m *Manager) locate(ctx context.Context, wt Worktree) (GitPaths, error) {
	if err := ValidSession(wt.Session); err != nil {
		return GitPaths{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return GitPaths{}, fmt.Errorf("worktree path %q is not absolute", wt.Path)
	}
	st := m.state(wt.Path)
	branch := branchOf(wt)
	if l := st.paths.Load(); l != nil && l.repo == wt.Repo && l.Branch == branch {
		return l.GitPaths, nil
	}
	if wt.Repo == "" {
		return GitPaths{}, fmt.Errorf("%w: worktree %s has no repository recorded", ErrNotRepository, wt.Path)
	}
	info, err := m.cachedRepo(ctx, wt.Repo)
	if err != nil {
		return GitPaths{}, err
	}
	admin, err := findAdmin(info.common, filepath.Clean(wt.Path))
	if err != nil {
		// The repository may have moved since it was cached: ask once more.
		m.forgetRepo(wt.Repo)
		fresh, rerr := m.cachedRepo(ctx, wt.Repo)
		if rerr != nil || fresh == info {
			return GitPaths{}, err
		}
		info = fresh
		if admin, err = findAdmin(info.common, filepath.Clean(wt.Path)); err != nil {
			return GitPaths{}, err
		}
	}
	p := GitPaths{CommonDir: info.common, AdminDir: admin, Branch: branch}
	st.paths.Store(&located{GitPaths: p, repo: wt.Repo})
	return p, nil
}

// open checks that wt's directory and admin directory exist and returns
// the location of git commands run in it. A missing directory gives an
// error wrapping ErrMissing.
func (m *Manager) open(ctx context.Context, wt Worktree) (wtLoc, error) {
	if err := ValidSession(wt.Session); err != nil {
		return wtLoc{}, err
	}
	if !filepath.IsAbs(wt.Path) {
		return wtLoc{}, fmt.Errorf("worktree path %q is not absolute", wt.Path)
	}
	if _, err := os.Stat(wt.Path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return wtLoc{}, fmt.Errorf("%w: %s", ErrMissing, wt.Path)
		}
		return wtLoc{}, err
	}
	p, err := m.locate(ctx, wt)
	if err != nil {
		return wtLoc{}, err
	}
	if _, err := os.Stat(p.AdminDir); err != nil {
		// Removed or re-created behind the Manager's back: look again.
		m.state(wt.Path).paths.Store(nil)
		if p, err = m.locate(ctx, wt); err != nil {
			return wtLoc{}, err
		}
	}
	return worktreeLoc(filepath.Clean(wt.Path), p.AdminDir, p.CommonDir), nil
}

// tamperedSuffix names what repairLinks moves out of the way of the .git
// file: a directory or other non-file an agent put at .git.
const tamperedSuffix = ".agentpool-tampered"

// repairLinks makes the worktree's .git file and its admin directory's
// gitdir file point at each other again, as git worktree add wrote them,
// so that git's own worktree commands (remove, list) and the agent's git
// agree with the Manager. What it replaces is logged; a .git that is not a
// regular file is renamed aside, never deleted. It reports whether it
// changed anything.
func (m *Manager) repairLinks(l wtLoc, session string) (bool, error) {
	gitFile := filepath.Join(l.dir, ".git")
	wantGit := "gitdir: " + l.admin
	repaired := false
	got, err := readGitFile(gitFile)
	if err != nil || got != wantGit {
		log := m.log.With(keySession, session, keyPath, l.dir)
		if fi, lerr := os.Lstat(gitFile); lerr == nil && !fi.Mode().IsRegular() {
			aside := gitFile + tamperedSuffix
			for i := 1; lexists(aside); i++ {
				aside = fmt.Sprintf("%s%s-%d", gitFile, tamperedSuffix, i)
			}
			if err := os.Rename(gitFile, aside); err != nil {
				return false, fmt.Errorf("repair %s: %w", gitFile, err)
			}
			log.Warn("worktree .git tampered with: not a file; moved aside", "moved_to", aside)
		} else {
			log.Warn("worktree .git file tampered with; repaired", "found", got, "want", wantGit)
		}
		if err := writeAtomic(gitFile, wantGit+"\n"); err != nil {
			return false, fmt.Errorf("repair %s: %w", gitFile, err)
		}
		repaired = true
	}
	gitdirFile := filepath.Join(l.admin, "gitdir")
	if g, err := readGitFile(gitdirFile); err != nil || gitdirOf(g, l.admin) != gitFile {
		m.log.Warn("worktree admin gitdir file tampered with; repaired", keySession, session, keyPath, l.admin, "found", g)
		if err := writeAtomic(gitdirFile, gitFile+"\n"); err != nil {
			return repaired, fmt.Errorf("repair %s: %w", gitdirFile, err)
		}
		repaired = true
	}
	return repaired, nil
}

// lexists reports whether path exists, without following a final symlink.
func lexists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writeAtomic replaces path with a new regular file holding content.
func writeAtomic(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".agentpool-tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// headOf returns the commit the worktree's HEAD names, read from its admin
// directory and resolved in the repository alone (see repo), or "" when
// HEAD names no commit. The agent owns its HEAD: it may name any commit,
// but only through the real refs.
func (m *Manager) headOf(ctx context.Context, l wtLoc) (string, error) {
	content, err := readGitFile(filepath.Join(l.admin, "HEAD"))
	if err != nil {
		m.log.Warn("unreadable worktree HEAD", keyPath, l.dir, keyErr, err)
		return "", nil
	}
	name, symbolic := strings.CutPrefix(content, "ref: ")
	ok := validRev(name) == nil
	if symbolic {
		ok = ok && strings.HasPrefix(name, "refs/")
	} else {
		ok = ok && strings.Trim(name, "0123456789abcdef") == ""
	}
	if !ok {
		m.log.Warn("worktree HEAD names no ref", keyPath, l.dir, "head", content)
		return "", nil
	}
	ids, err := m.resolve(ctx, l.repo(), name+"^{commit}")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}
