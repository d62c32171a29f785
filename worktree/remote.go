package worktree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"unicode"
)

// A repository may be given by URL instead of by the path of a checkout:
// a shared bare repository's path, or a file://, ssh:// or https:// URL, or
// ssh's scp-like user@host:path. Each host then keeps a mirror of it, a bare
// repository in Config.MirrorRoot, which it fetches before making a
// session's worktree; worktrees are made from the mirror exactly as from a
// local checkout, and the sessions' branches and checkpoints are pushed
// back to the remote (see Push), so that another host can continue them
// (see Continue). Such a session's Worktree.Repo is the URL (a bare path
// cleaned), which names the remote, not a checkout.

// ErrInvalidURL is returned for a repository URL that is refused: a
// scheme other than file, ssh and https, a transport helper (ext::, fd::),
// something that looks like an option, credentials in the URL, or control
// characters.
var ErrInvalidURL = errors.New("invalid repository URL")

// mirrorHashLen is how many hex digits of the URL's SHA-256 name its mirror.
const mirrorHashLen = 16

// remote is a repository given by URL.
type remote struct {
	url   string // canonical: what Worktree.Repo records
	local bool   // reached through the file transport (a path or file://)
}

// IsURL reports whether repo names a repository by URL (file://, ssh://,
// https://, or scp-like host:path) rather than by a path. A path to a bare
// repository is not a URL, but is mirrored all the same.
func IsURL(repo string) bool {
	if strings.Contains(repo, "://") || strings.Contains(repo, "::") {
		return true
	}
	if filepath.IsAbs(repo) || strings.HasPrefix(repo, ".") {
		return false
	}
	colon := strings.IndexByte(repo, ':')
	slash := strings.IndexByte(repo, '/')
	return colon > 0 && (slash < 0 || colon < slash)
}

// parseRemote validates a repository URL and returns its canonical form.
// Errors wrap ErrInvalidURL and say what is wrong.
func parseRemote(raw string) (remote, error) {
	bad := func(why string) (remote, error) {
		err := fmt.Errorf("%w: %q: %s", ErrInvalidURL, redactURL(raw), why)
		return remote{}, &userError{msg: "the repository URL " + redactURL(raw) + " is refused: " + why, err: err}
	}
	switch {
	case raw == "":
		return bad("empty")
	case strings.HasPrefix(raw, "-"):
		return bad("it looks like an option")
	case strings.Contains(raw, "::"):
		return bad("transport helpers (ext::, fd::) are not allowed")
	case strings.Contains(raw, "--upload-pack") || strings.Contains(raw, "--receive-pack"):
		return bad("it looks like an option")
	}
	for _, r := range raw {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return bad("it contains a space or a control character")
		}
	}
	if !strings.Contains(raw, "://") {
		// scp-like: [user@]host:path.
		host, path, _ := strings.Cut(raw, ":")
		user, h, hasUser := strings.Cut(host, "@")
		if !hasUser {
			h, user = user, ""
		}
		switch {
		case h == "" || strings.HasPrefix(h, "-"):
			return bad("no host, or a host that looks like an option")
		case strings.Contains(user, ":") || strings.Contains(h, "@"):
			return bad("credentials are not allowed in the URL (use ssh keys or a credential helper)")
		case path == "" || strings.HasPrefix(path, "-"):
			return bad("no path, or a path that looks like an option")
		}
		return remote{url: raw}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad(err.Error())
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return bad("a file:// URL names no host")
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" || !filepath.IsAbs(u.Path) || u.Path != filepath.Clean(u.Path) {
			return bad("a file:// URL is file:///absolute/clean/path")
		}
		return remote{url: "file://" + u.Path, local: true}, nil
	case "ssh":
		if _, hasPass := u.User.Password(); hasPass {
			return bad("credentials are not allowed in the URL (use ssh keys or a credential helper)")
		}
		if strings.HasPrefix(u.User.Username(), "-") {
			return bad("a user that looks like an option")
		}
	case "https":
		if u.User != nil {
			return bad("credentials are not allowed in the URL (use a credential helper)")
		}
	default:
		return bad("the scheme must be file, ssh or https")
	}
	if u.Host == "" || strings.HasPrefix(u.Hostname(), "-") {
		return bad("no host, or a host that looks like an option")
	}
	if u.Fragment != "" {
		return bad("a fragment (#...) is not part of a repository URL")
	}
	if u.Path == "" || u.Path == "/" {
		return bad("no repository path")
	}
	return remote{url: raw}, nil
}

// bareRemote is the remote of a bare repository given by its path.
func bareRemote(path string) remote {
	return remote{url: filepath.Clean(path), local: true}
}

// redactURL drops what a URL's user information holds, for messages.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = url.User("***")
		return u.String()
	}
	return raw
}

// mirrorDir is the directory of the mirror of the remote url.
func (m *Manager) mirrorDir(u string) string {
	sum := sha256.Sum256([]byte(u))
	name := strings.TrimSuffix(repoName(strings.TrimRight(u, "/")), ".git")
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	if name == "" {
		name = "repo"
	}
	return filepath.Join(m.mirrors, name+namespaceSep+hex.EncodeToString(sum[:])[:mirrorHashLen]+".git")
}

// remoteOf says whether repo (as a Worktree records it, or a caller gives
// it) names a remote by URL, and which. A path is not: a bare one is found
// by repo when git says it is bare.
func remoteOf(repo string) (remote, bool, error) {
	if !IsURL(repo) && !strings.HasPrefix(repo, "-") {
		return remote{}, false, nil
	}
	r, err := parseRemote(repo)
	return r, true, err
}

// LocalPath returns the directory of the repository repo names when it is
// on this host's disk (a path, or a file:// URL), "" otherwise: what a
// sandbox protects, as it protects a main checkout.
func LocalPath(repo string) string {
	if !IsURL(repo) {
		if filepath.IsAbs(repo) {
			return filepath.Clean(repo)
		}
		return ""
	}
	r, err := parseRemote(repo)
	if err != nil || !r.local {
		return ""
	}
	return strings.TrimPrefix(r.url, "file://")
}
