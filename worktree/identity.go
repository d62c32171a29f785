package worktree

import (
	"context"
	"strings"
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
func (m *Manager) Identity(ctx context.Context, repo string) Identity {
	if name, email, ok := m.configIdentity(ctx, at(repo)); ok {
		return Identity{Name: name, Email: email}
	}
	return m.author
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
