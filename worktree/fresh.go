package worktree

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A worktree that `git worktree add` has just checked out (hooks off, see
// git.go), with no setup to run, holds exactly its base commit's tree:
// every file tracked, none changed, nothing untracked or ignored. Its
// first checkpoint, which a session's warm-up takes before its agent
// starts, would run six git processes to learn that. seedFresh records it
// instead: the change tracker starts watching the worktree right after
// the checkout, and the base tree is its checkpoint until anything
// changes there (any event, or a change of the git files that decide a
// snapshot). The chain of checkpoints still begins with that state: the
// next checkpoint that anchors commits it first (see anchorLocked).
//
// Where a checkout may differ from its commit once git looks again, the
// worktree is scanned as before: a .gitattributes file anywhere in it, an
// attributes file of the repository or the user (where filters and text
// conversions are named), or git configuration that converts line ends
// without attributes (autocrlf, eol) or includes other files, which a
// plain reading cannot follow.

// seedFresh records the tree of the worktree just added at path as its
// checkpoint when the Manager can vouch for it (see above); otherwise the
// first checkpoint scans.
func (m *Manager) seedFresh(info repoInfo, path, tree string) {
	if tree == "" {
		return
	}
	st := m.state(path)
	p := st.paths.Load()
	if p == nil || !m.plainCheckout(p.CommonDir, p.AdminDir) {
		return
	}
	gen, ok := m.changes.begin(path)
	if !ok || m.changes.sawAttributes(path) {
		return
	}
	m.changes.record(path, gen, tree, m.fingerprintOf(p.AdminDir, p.CommonDir))
	st.mu.Lock()
	st.seed = tree
	st.mu.Unlock()
	m.log.Debug("fresh worktree: its checkpoint is its base tree", keyPath, path, "tree", tree, keyRepo, info.top)
}

// systemConfig is the system's git configuration file, as git finds it
// from the environment it runs with.
func (m *Manager) systemConfig() string {
	system := "/etc/gitconfig"
	for _, kv := range m.env {
		if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_SYSTEM="); ok {
			system = v
		}
	}
	return system
}

// convertingConfig are what, in a git configuration file, may make a
// fresh checkout differ from its commit when git reads it back (or hide
// a setting that does), lower-cased. A filter's definition is not among
// them: it applies only where an attribute names it, and attributes are
// looked for apart (git lfs install defines one in most users' config).
var convertingConfig = [][]byte{[]byte("autocrlf"), []byte("eol"), []byte("safecrlf"), []byte("attributesfile"), []byte("include")}

// plainCheckout reports whether no attributes file and no configuration
// of the repository (common, its worktree admin directory admin), the
// user or the system can make a fresh checkout read back differently
// from its commit. A file that cannot be read counts against it.
func (m *Manager) plainCheckout(common, admin string) bool {
	var attrs []string
	configs := []string{filepath.Join(common, "config"), filepath.Join(admin, "config.worktree"), m.globalConfig, m.systemConfig()}
	attrs = append(attrs, filepath.Join(common, "info", "attributes"), filepath.Join(admin, "info", "attributes"))
	if m.globalIgnore != "" { // $XDG_CONFIG_HOME/git/ignore
		dir := filepath.Dir(m.globalIgnore)
		configs = append(configs, filepath.Join(dir, "config"))
		attrs = append(attrs, filepath.Join(dir, "attributes"))
	}
	for _, a := range attrs {
		if _, err := os.Lstat(a); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return !configMentions(configs, convertingConfig...)
}

// configMentions reports whether any of the git configuration files
// mentions one of words (lower-case, compared without case), or cannot be
// read; a missing file or an empty name mentions nothing.
func configMentions(files []string, words ...[]byte) bool {
	for _, f := range files {
		if f == "" {
			continue
		}
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return true
		}
		data = bytes.ToLower(data)
		for _, w := range words {
			if bytes.Contains(data, w) {
				return true
			}
		}
	}
	return false
}
