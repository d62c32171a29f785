package worktree

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Identity is a git user: the name and email commits are made with.
type Identity struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	// Default is set when the repository's configuration (its own, the
	// user's global one, the system's) gives no complete identity and the
	// Manager's own (Config.Author, Config.AuthorEmail) stands in.
	Default bool `json:"default,omitempty"`
}

// Identity returns the identity git's configuration gives in the
// repository at repo (user.name and user.email, as `git config` resolves
// them there), or the Manager's own with Default set when either is
// missing or cannot be read. Agents get it in their environment: their
// configuration files may be out of their reach.
//
// Every agent's start asks; the answer is kept per repository while the
// configuration files it came from are unchanged (see identityCache).
func (m *Manager) Identity(ctx context.Context, repo string) Identity {
	files := m.identityFiles(ctx, repo)
	st := stamps(files) // before git reads them
	if id, ok := m.identities.get(repo, st); ok {
		return id
	}
	id := m.author
	if name, email, ok := m.configIdentity(ctx, at(repo)); ok {
		id = Identity{Name: name, Email: email}
	}
	m.identities.put(repo, files, st, id)
	return id
}

// identityFiles are the configuration files git reads for repo's
// identity (the repository's, the user's two, the system's), or nil when
// they are not known.
func (m *Manager) identityFiles(ctx context.Context, repo string) []string {
	info, err := m.cachedRepo(ctx, repo)
	if err != nil {
		return nil
	}
	files := []string{filepath.Join(info.common, "config"), m.globalConfig, m.systemConfig()}
	if m.globalIgnore != "" { // $XDG_CONFIG_HOME/git/ignore
		files = append(files, filepath.Join(filepath.Dir(m.globalIgnore), "config"))
	}
	return files
}

// identityCache keeps the identity of each repository with the stamps of
// the configuration files it was read from; a change of any of them (or
// of a file appearing) reads it again. Configuration that includes other
// files is never kept: a change there would not show.
type identityCache struct {
	mu     sync.Mutex
	byRepo map[string]cachedIdentity
}

type cachedIdentity struct {
	id     Identity
	stamps []fileStamp
}

// identityCacheMax bounds the repositories kept.
const identityCacheMax = 256

// stamps stamps each of files; nil for none.
func stamps(files []string) []fileStamp {
	if files == nil {
		return nil
	}
	out := make([]fileStamp, len(files))
	for i, f := range files {
		if f != "" {
			out[i] = stamp(f)
		}
	}
	return out
}

// get returns the identity kept for repo if its files still have the
// stamps st.
func (c *identityCache) get(repo string, st []fileStamp) (Identity, bool) {
	if st == nil {
		return Identity{}, false
	}
	c.mu.Lock()
	e, ok := c.byRepo[repo]
	c.mu.Unlock()
	if !ok || !slices.Equal(e.stamps, st) {
		return Identity{}, false
	}
	return e.id, true
}

// put keeps id for repo, as read from files whose stamps st were taken
// before the read, unless a file includes another.
func (c *identityCache) put(repo string, files []string, st []fileStamp, id Identity) {
	if files == nil || configMentions(files, []byte("include")) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byRepo == nil || len(c.byRepo) >= identityCacheMax {
		c.byRepo = make(map[string]cachedIdentity)
	}
	c.byRepo[repo] = cachedIdentity{id: id, stamps: st}
}

// configIdentity returns the user.name and user.email that git's
// configuration gives in l, and whether both are set.
func (m *Manager) configIdentity(ctx context.Context, l wtLoc) (name, email string, ok bool) {
	out, err := m.git(ctx, l, "config", "--get-regexp", `^user\.(name|email)$`)
	if err != nil {
		return "", "", false
	}
	for _, line := range strings.Split(out, "\n") {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "user.name":
			name = val
		case "user.email":
			email = val
		}
	}
	if strings.TrimSpace(name) == "" || strings.TrimSpace(email) == "" {
		return "", "", false
	}
	return name, email, true
}
