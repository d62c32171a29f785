package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ChangeStatus says how a file changed between two states.
type ChangeStatus string

// Change statuses.
const (
	StatusAdded       ChangeStatus = "added"
	StatusDeleted     ChangeStatus = "deleted"
	StatusModified    ChangeStatus = "modified" // content and/or mode
	StatusRenamed     ChangeStatus = "renamed"
	StatusCopied      ChangeStatus = "copied"
	StatusTypeChanged ChangeStatus = "type-changed" // e.g. file to symlink
)

// FileChange is one changed file.
type FileChange struct {
	// Path is the file's path after the change (before it, for a deletion),
	// relative to the worktree, with forward slashes.
	Path string `json:"path"`
	// OldPath is the path before a rename or copy.
	OldPath string       `json:"old_path,omitempty"`
	Status  ChangeStatus `json:"status"`
	// OldMode and NewMode are git modes ("100644", "100755", "120000");
	// empty on the side where the file does not exist.
	OldMode string `json:"old_mode,omitempty"`
	NewMode string `json:"new_mode,omitempty"`
	// Similarity is the rename or copy score in percent.
	Similarity int `json:"similarity,omitempty"`
	// Additions and Deletions count lines; both are 0 for a binary file.
	Additions int  `json:"additions"`
	Deletions int  `json:"deletions"`
	Binary    bool `json:"binary,omitempty"`
}

// Stat sums a diff.
type Stat struct {
	Files     int `json:"files"`
	Additions int `json:"additions"`
	Deletions int `json:"deletions"`
}

// Diff is the difference between two worktree states.
type Diff struct {
	// From and To are the tree ids compared.
	From string `json:"from"`
	To   string `json:"to"`
	// Files lists the changed files in path order; renames are detected.
	Files []FileChange `json:"files"`
	Stat  Stat         `json:"stat"`
	// Patch is the unified diff (a/ and b/ prefixes; binary files show as
	// "Binary files ... differ"), cut at a line end after MaxPatchBytes.
	Patch     string `json:"patch"`
	Truncated bool   `json:"truncated,omitempty"`
	// Hidden lists untracked paths of the live worktree that ignore rules
	// the session added or changed (a .gitignore that differs from the
	// base) keep out of every checkpoint and diff, with the rule; at most
	// maxHiddenListed of them. HiddenCount counts them all.
	Hidden      []HiddenFile `json:"hidden,omitempty"`
	HiddenCount int          `json:"hidden_count,omitempty"`
	// Copied lists the files the worktree's setup copied from the main
	// checkout (see Setup.Copy), when the live worktree is compared: they
	// are not part of the session's work, never in a checkpoint, commit or
	// merge, and the diff shows no content of theirs, even when the agent
	// changed them.
	Copied []CopiedFile `json:"copied,omitempty"`
}

// Diff compares two states of the worktree. from and to are checkpoint tree
// ids or any tree-ish; from "" means wt.BaseCommit, to "" means the live
// state of the worktree (snapshotted as Checkpoint does, without anchoring
// it), so Diff(ctx, wt, "", "") is the whole session against its base.
// Once the worktree has been removed, states that git holds (checkpoints,
// the session branch) can still be compared, in the repository; the live
// state cannot. Errors wrap ErrUnknownRef or ErrMissing.
func (m *Manager) Diff(ctx context.Context, wt Worktree, from, to string) (Diff, error) {
	l, err := m.open(ctx, wt)
	removed := errors.Is(err, ErrMissing) && to != ""
	if removed {
		info, rerr := m.repo(ctx, wt.Repo)
		if rerr != nil {
			return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, rerr)
		}
		l, err = repoAt(info), nil
	}
	if err != nil {
		return Diff{}, err
	}
	m.importFirst(ctx, wt)
	if from == "" {
		from = wt.BaseCommit
		if from == "" {
			return Diff{}, fmt.Errorf("%w: session %q has no base commit", ErrUnknownRef, wt.Session)
		}
	}
	names := []string{from}
	if to != "" {
		names = append(names, to)
	}
	for _, n := range names {
		if err := validRev(n); err != nil {
			return Diff{}, err
		}
	}
	if !removed {
		st := m.state(wt.Path)
		st.mu.Lock()
		defer st.mu.Unlock()
	}
	for i := range names {
		names[i] += "^{tree}"
	}
	ids, err := m.resolve(ctx, l.repo(), names...)
	if err != nil {
		return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, err)
	}
	for i, id := range ids {
		if id == "" {
			return Diff{}, fmt.Errorf("%w: %q is not a tree in %s", ErrUnknownRef, strings.TrimSuffix(names[i], "^{tree}"), wt.Path)
		}
	}
	d := Diff{From: ids[0], Files: []FileChange{}}
	if to != "" {
		d.To = ids[1]
	} else if d.To, err = m.snapshot(ctx, l); err != nil {
		return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, err)
	}
	if !removed {
		if d.Copied, err = m.copiedFiles(l); err != nil {
			return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, err)
		}
	}
	if !removed && wt.BaseCommit != "" {
		// What changed ignore rules hide, whether or not the trees differ.
		if err := m.hiddenBy(ctx, l, wt.BaseCommit, &d); err != nil {
			m.log.Warn("list files hidden by changed ignore rules", keySession, wt.Session, keyErr, err)
		}
	}
	if d.From == d.To {
		return d, nil
	}
	out, err := m.run(ctx, call{at: l, args: []string{"diff-tree", "-r", "-z", "-M", "--raw", "--numstat", "--no-ext-diff", "--no-textconv", d.From, d.To, "--"}})
	if err != nil {
		return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, err)
	}
	files, err := parseRawNumstat(out)
	if err != nil {
		return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, err)
	}
	d.Files = append(d.Files, files...)
	sort.SliceStable(d.Files, func(i, j int) bool { return d.Files[i].Path < d.Files[j].Path })
	for _, f := range d.Files {
		d.Stat.Files++
		d.Stat.Additions += f.Additions
		d.Stat.Deletions += f.Deletions
	}
	patch := &capWriter{max: m.maxPatch}
	if _, err := m.run(ctx, call{at: l, stdout: patch, args: []string{
		"diff-tree", "-r", "-p", "-M", "--no-color", "--no-ext-diff", "--no-textconv",
		"--src-prefix=a/", "--dst-prefix=b/", d.From, d.To, "--",
	}}); err != nil {
		return Diff{}, fmt.Errorf("diff session %q: %w", wt.Session, err)
	}
	d.Patch, d.Truncated = patch.String(), patch.truncated
	return d, nil
}

// parseRawNumstat parses `diff-tree -z --raw --numstat`: every raw record
// (":old new oldsha newsha status\0path\0[path\0]"), then every numstat
// record ("add\tdel\tpath\0" or "add\tdel\t\0old\0new\0"), in the same
// order.
func parseRawNumstat(out []byte) ([]FileChange, error) {
	toks := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	var files []FileChange
	n := 0 // numstat records seen
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, ":") {
			f, used, err := parseRaw(t, toks[i+1:])
			if err != nil {
				return nil, err
			}
			files = append(files, f)
			i += used
			continue
		}
		add, rest, ok1 := strings.Cut(t, "\t")
		del, path, ok2 := strings.Cut(rest, "\t")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("unexpected numstat record %q", t)
		}
		if path == "" { // rename: old and new paths follow
			i += 2
		}
		if n >= len(files) {
			return nil, fmt.Errorf("numstat record %q without raw record", t)
		}
		f := &files[n]
		n++
		if add == "-" && del == "-" {
			f.Binary = true
			continue
		}
		f.Additions, _ = strconv.Atoi(add)
		f.Deletions, _ = strconv.Atoi(del)
	}
	return files, nil
}

// parseRaw parses one raw record whose paths are in next; it returns how
// many of them it used.
func parseRaw(head string, next []string) (FileChange, int, error) {
	fields := strings.Fields(strings.TrimPrefix(head, ":"))
	if len(fields) != 5 || len(next) == 0 {
		return FileChange{}, 0, fmt.Errorf("unexpected raw diff record %q", head)
	}
	f := FileChange{OldMode: mode(fields[0]), NewMode: mode(fields[1]), Path: next[0]}
	status := fields[4]
	used := 1
	switch status[0] {
	case 'A':
		f.Status = StatusAdded
	case 'D':
		f.Status = StatusDeleted
	case 'M':
		f.Status = StatusModified
	case 'T':
		f.Status = StatusTypeChanged
	case 'R', 'C':
		if len(next) < 2 {
			return FileChange{}, 0, fmt.Errorf("unexpected raw diff record %q", head)
		}
		f.Status = StatusRenamed
		if status[0] == 'C' {
			f.Status = StatusCopied
		}
		f.OldPath, f.Path = next[0], next[1]
		f.Similarity, _ = strconv.Atoi(status[1:])
		used = 2
	default:
		return FileChange{}, 0, fmt.Errorf("unexpected diff status %q", status)
	}
	return f, used, nil
}

// mode maps git's all-zero mode of an absent side to "".
func mode(s string) string {
	if strings.Trim(s, "0") == "" {
		return ""
	}
	return s
}

// capWriter keeps the first max bytes written to it and drops the rest, so
// that git can always write its whole output.
type capWriter struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

// Write keeps what fits and reports everything written.
func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room < len(p) {
		w.truncated = true
		if room > 0 {
			w.buf.Write(p[:room])
		}
		return len(p), nil
	}
	w.buf.Write(p)
	return len(p), nil
}

// String returns what was kept, cut after its last line end if truncated.
func (w *capWriter) String() string {
	b := w.buf.Bytes()
	if w.truncated {
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[:i+1]
		}
	}
	return string(b)
}
