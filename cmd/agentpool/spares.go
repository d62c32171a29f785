package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/worktree"
)

// recentRepoWindow is how recently a repository must have had a session
// created for the daemon to keep spares for it.
const recentRepoWindow = 24 * time.Hour

// addSpares parses one --spares ID=N.
func (m *Main) addSpares(v string) error {
	id, n, ok := strings.Cut(v, "=")
	count, err := strconv.Atoi(n)
	if !ok || id == "" || err != nil || count < 0 || count > 64 {
		return fmt.Errorf("want PROVIDER=N with N from 0 to 64, got %q", v)
	}
	if m.Spares == nil {
		m.Spares = map[string]int{}
	}
	m.Spares[id] = count
	return nil
}

// addSpareRepo parses one --spares-repo DIR.
func (m *Main) addSpareRepo(v string) error {
	abs, err := filepath.Abs(v)
	if err != nil {
		return fmt.Errorf("--spares-repo %q: %w", v, err)
	}
	m.SpareRepos = append(m.SpareRepos, abs)
	return nil
}

// sparesConfig is the pool's spares: for each enabled provider, the
// "spares" of its providers.json entry (read again at each check, so an
// edit of the file takes effect without a restart), or the --spares flag,
// which wins.
func (m *Main) sparesConfig(wt *worktree.Manager) pool.SparesConfig {
	flags := maps.Clone(m.Spares)
	return pool.SparesConfig{
		Providers: func() map[string]int {
			want := map[string]int{}
			for _, p := range m.reg.Snapshot().Providers {
				if p.Enabled && p.Spares > 0 {
					want[p.ID] = p.Spares
				}
			}
			for id, n := range flags {
				if n > 0 {
					want[id] = n
				} else {
					delete(want, id)
				}
			}
			return want
		},
		Repos: m.spareRepos,
		Git:   wiring.SpareGit{M: wt},
	}
}

// spareRepos lists the --spares-repo repositories and those of the
// sessions created in the last day.
func (m *Main) spareRepos(ctx context.Context) []string {
	seen := map[string]bool{}
	var out []string
	add := func(r string) {
		if r != "" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, r := range m.SpareRepos {
		add(r)
	}
	list, err := m.store.ListSessions(ctx)
	if err != nil {
		m.Logger.Debug("spares: list sessions", "err", err)
		return out
	}
	since := time.Now().Add(-recentRepoWindow)
	for _, s := range list {
		if s.CreatedAt.After(since) {
			add(s.Repo)
		}
	}
	return out
}

// removeOrphanSpare removes f, a worktree no session knows, when it is a
// spare that a killed daemon left (its session id starts with
// pool.SpareIDPrefix), with its branch; it reports whether it did.
func (m *Main) removeOrphanSpare(ctx context.Context, wt *worktree.Manager, f worktree.Found) bool {
	if !strings.HasPrefix(f.Session, pool.SpareIDPrefix) || f.Repo == "" || !f.OnDisk {
		return false
	}
	if _, err := m.store.GetSession(ctx, f.Session); err == nil {
		return false
	}
	res, err := wt.Remove(ctx, worktree.Worktree{Session: f.Session, Repo: f.Repo, Path: f.Path, Branch: f.Branch}, true)
	if err != nil {
		m.Logger.Warn("remove a spare left by the previous daemon", "path", f.Path, "err", err)
		return false
	}
	m.Logger.Info("removed a spare left by the previous daemon", "path", f.Path, "branch", f.Branch, "branch_deleted", res.BranchDeleted)
	return true
}

// sparesFromEnv reads $AGENTPOOL_SPARES (ID=N,...) and
// $AGENTPOOL_SPARES_REPOS (a path list), the defaults of --spares and
// --spares-repo.
func (m *Main) sparesFromEnv(getenv func(string) string) error {
	for _, v := range strings.Split(getenv("AGENTPOOL_SPARES"), ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if err := m.addSpares(v); err != nil {
			return fmt.Errorf("$AGENTPOOL_SPARES: %w", err)
		}
	}
	for _, v := range filepath.SplitList(getenv("AGENTPOOL_SPARES_REPOS")) {
		if v == "" {
			continue
		}
		if err := m.addSpareRepo(v); err != nil {
			return fmt.Errorf("$AGENTPOOL_SPARES_REPOS: %w", err)
		}
	}
	return nil
}
