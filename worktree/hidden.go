package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
)

// An agent can hide what it writes from checkpoints, diffs and the
// session's branch by writing ignore rules: a .gitignore of "*" written
// during a turn makes every new file ignored, the .gitignore included.
// Two things keep that visible. A snapshot always holds the worktree's
// .gitignore files, even ignored ones (snapshotInto), so a turn that
// changes the rules shows that change. And a diff lists the untracked
// files that the rules the session added or changed now hide (Hidden),
// with the rule that hides each.

// Bounds of the hidden-file report.
const (
	// maxHiddenListed is how many hidden paths a Diff lists; the rest are
	// counted in Diff.HiddenCount.
	maxHiddenListed = 100
	// maxHiddenChecked bounds the ignored entries examined for one Diff.
	maxHiddenChecked = 10000
	// maxForcedIgnoreFiles bounds the ignored .gitignore files a snapshot
	// adds.
	maxForcedIgnoreFiles = 1000
	// ignoreFileName is the per-directory ignore file git reads.
	ignoreFileName = ".gitignore"
)

// HiddenFile is an untracked path that an ignore rule the session added or
// changed keeps out of checkpoints and diffs.
type HiddenFile struct {
	// Path is relative to the worktree, "/"-separated; a directory (all
	// of it hidden) ends in "/".
	Path string `json:"path"`
	// Rule is where the hiding rule is and what it says:
	// "<file>:<line>:<pattern>".
	Rule string `json:"rule"`
}

// ignoredEntries lists the untracked paths the worktree's ignore rules
// hide, directories collapsed (ending in "/"), at most limit of them.
func (m *Manager) ignoredEntries(ctx context.Context, l wtLoc, env []string, limit int) ([]string, error) {
	out, err := m.run(ctx, call{at: l, env: env, args: []string{"ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"}})
	if err != nil {
		return nil, fmt.Errorf("list ignored files: %w", err)
	}
	var paths []string
	for _, p := range bytes.Split(out, []byte{0}) {
		if len(p) == 0 {
			continue
		}
		if len(paths) >= limit {
			break
		}
		paths = append(paths, string(p))
	}
	return paths, nil
}

// addIgnoreFiles adds the ignored .gitignore files of the worktree to the
// temporary index, so that a snapshot shows every change of the ignore
// rules, even of a .gitignore that ignores itself.
func (m *Manager) addIgnoreFiles(ctx context.Context, l wtLoc, idx *tempIndex) error {
	entries, err := m.ignoredEntries(ctx, l, idx.env(), maxHiddenChecked)
	if err != nil {
		return err
	}
	args := []string{"add", "--force", "--"}
	n := 0
	for _, e := range entries {
		if path.Base(e) == ignoreFileName && !strings.HasSuffix(e, "/") {
			args = append(args, e) // pathspecs are literal (GIT_LITERAL_PATHSPECS)
			n++
			if n >= maxForcedIgnoreFiles {
				break
			}
		}
	}
	if n == 0 {
		return nil
	}
	if _, err := m.run(ctx, call{at: l, env: idx.env(), args: args}); err != nil {
		return fmt.Errorf("add ignored %s files: %w", ignoreFileName, err)
	}
	return nil
}

// hiddenBy fills d.Hidden and d.HiddenCount: the untracked entries of the
// live worktree at l that a .gitignore changed since base (in d.To) hides.
// It costs one tree comparison when the session changed no .gitignore.
func (m *Manager) hiddenBy(ctx context.Context, l wtLoc, base string, d *Diff) error {
	out, err := m.run(ctx, call{at: l, args: []string{"diff-tree", "-r", "-z", "--name-only", "--no-renames", base, d.To, "--"}})
	if err != nil {
		return fmt.Errorf("changed %s files: %w", ignoreFileName, err)
	}
	changed := map[string]bool{}
	for _, p := range bytes.Split(out, []byte{0}) {
		if path.Base(string(p)) == ignoreFileName {
			changed[string(p)] = true
		}
	}
	if len(changed) == 0 {
		return nil
	}
	idx, err := newTempIndex(m.tmpDir, l.admin)
	if err != nil {
		return err
	}
	defer idx.remove()
	entries, err := m.ignoredEntries(ctx, l, idx.env(), maxHiddenChecked)
	if err != nil || len(entries) == 0 {
		return err
	}
	var in bytes.Buffer
	for i, e := range entries {
		if path.Base(e) == ignoreFileName {
			continue // in the snapshot (addIgnoreFiles): not hidden
		}
		if strings.HasSuffix(e, "/") && i+1 < len(entries) && strings.HasPrefix(entries[i+1], e) {
			continue // its contents are listed one by one (sorted: they follow)
		}
		in.WriteString(e)
		in.WriteByte(0)
	}
	if in.Len() == 0 {
		return nil
	}
	// check-ignore takes paths, not pathspecs: it refuses literal magic.
	env := append(idx.env(), "GIT_LITERAL_PATHSPECS=0")
	out, err = m.run(ctx, call{at: l, env: env, stdin: &in, args: []string{"check-ignore", "-v", "-z", "--stdin"}})
	if ge := (*GitError)(nil); errors.As(err, &ge) && ge.ExitCode == 1 {
		return nil // nothing matched
	}
	if err != nil {
		return fmt.Errorf("check ignore rules: %w", err)
	}
	f := bytes.Split(out, []byte{0})
	for i := 0; i+3 < len(f); i += 4 {
		source, line, pattern, p := string(f[i]), string(f[i+1]), string(f[i+2]), string(f[i+3])
		if strings.HasPrefix(pattern, "!") || !changed[source] {
			continue
		}
		d.HiddenCount++
		if len(d.Hidden) < maxHiddenListed {
			d.Hidden = append(d.Hidden, HiddenFile{Path: p, Rule: source + ":" + line + ":" + pattern})
		}
	}
	return nil
}
