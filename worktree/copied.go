package worktree

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Files a setup copies from the main checkout (see Setup.Copy) are often
// secrets: a .env, certificates. They are the user's, not the session's
// work, so they never enter a checkpoint, the commit that keeps a
// worktree's work, or a merge, even when the agent changed them; a Diff
// names them as copied, without their content.
//
// The list of copied paths is the Manager's own record, one file per
// worktree in a directory under Root that no agent can write (never in the
// worktree or its admin directory, which the agent can write: it could
// then drop its own files into the list to hide them, or take a secret off
// it). The record outlives the worktree, so that Merge still refuses a
// branch of a closed session whose agent committed a copied file (see
// copiedMerged); Prune, or Remove with discard, deletes it.

// copiedDirName is the directory under Root holding the records of copied
// files; never a repository namespace.
const copiedDirName = ".copied"

// copiedRecord is the file that records a worktree's copied paths.
type copiedRecord struct {
	// Worktree is the worktree's path, checked when the record is read.
	Worktree string `json:"worktree"`
	// Paths are relative to the worktree, "/"-separated, sorted.
	Paths []string `json:"paths"`
}

// CopiedFile is a file a setup copied into the worktree from the main
// checkout: not part of the session's work, never committed.
type CopiedFile struct {
	// Path is relative to the worktree, "/"-separated.
	Path string `json:"path"`
	// Present is false when the file is no longer in the worktree.
	Present bool `json:"present"`
}

// copiedFile returns the record file of the worktree at path.
func (m *Manager) copiedFile(path string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(path)))
	return filepath.Join(m.root, copiedDirName, hex.EncodeToString(sum[:16])+".json")
}

// copiedOf returns the paths a setup copied into the worktree at path,
// from the Manager's memory or its record. A record that cannot be read
// is an error: a snapshot taken without it could commit a secret.
func (m *Manager) copiedOf(path string) ([]string, error) {
	path = filepath.Clean(path)
	m.mu.Lock()
	paths, ok := m.copied[path]
	m.mu.Unlock()
	if ok {
		return paths, nil
	}
	b, err := os.ReadFile(m.copiedFile(path))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		paths = nil
	case err != nil:
		return nil, fmt.Errorf("read the list of copied files: %w", err)
	default:
		var rec copiedRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("read the list of copied files %s: %w", m.copiedFile(path), err)
		}
		if rec.Worktree == path {
			paths = rec.Paths
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.copied[path] = paths
	return paths, nil
}

// recordCopied adds paths to the record of the worktree at path, durably
// (written to a temporary file, synced, renamed), before the copies can be
// part of any snapshot.
func (m *Manager) recordCopied(path string, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	path = filepath.Clean(path)
	old, err := m.copiedOf(path)
	if err != nil {
		return err
	}
	all := dedupe(append(append([]string(nil), old...), paths...))
	sort.Strings(all)
	b, err := json.Marshal(copiedRecord{Worktree: path, Paths: all})
	if err != nil {
		return err
	}
	dir := filepath.Join(m.root, copiedDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("record copied files: %w", err)
	}
	f, err := os.CreateTemp(dir, "record-*")
	if err != nil {
		return fmt.Errorf("record copied files: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), m.copiedFile(path))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("record copied files: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.copied[path] = all
	return nil
}

// dropCopied deletes the record of the worktree at path, whose session is
// being forgotten.
func (m *Manager) dropCopied(path string) {
	path = filepath.Clean(path)
	if err := os.Remove(m.copiedFile(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("delete the list of copied files", keyPath, path, keyErr, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.copied, path)
}

// leaveOutCopied takes the copied files of the worktree at l out of the
// temporary index, whatever the agent did to them: a snapshot never holds
// them.
func (m *Manager) leaveOutCopied(ctx context.Context, l wtLoc, idx *tempIndex) error {
	paths, err := m.copiedOf(l.dir)
	if err != nil || len(paths) == 0 {
		return err
	}
	var in bytes.Buffer
	for _, p := range paths {
		in.WriteString(p)
		in.WriteByte(0)
	}
	if _, err := m.run(ctx, call{at: l, env: idx.env(), stdin: &in, args: []string{"update-index", "--force-remove", "-z", "--stdin"}}); err != nil {
		return fmt.Errorf("leave copied files out: %w", err)
	}
	return nil
}

// copiedFiles lists the copied files of the live worktree at l, and
// whether each is still there.
func (m *Manager) copiedFiles(l wtLoc) ([]CopiedFile, error) {
	paths, err := m.copiedOf(l.dir)
	if err != nil || len(paths) == 0 {
		return nil, err
	}
	root, err := os.OpenRoot(l.dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	files := make([]CopiedFile, 0, len(paths))
	for _, p := range paths {
		_, err := root.Lstat(filepath.FromSlash(p))
		files = append(files, CopiedFile{Path: p, Present: err == nil})
	}
	return files, nil
}

// copiedMerged returns the copied files of the worktree at path that a
// merge from commit from to commit to would bring in: changed by a commit
// of from..to (the agent may commit a copy with its own git), full history,
// so that a commit adding a secret and a later one deleting it count too.
func (m *Manager) copiedMerged(ctx context.Context, l wtLoc, path, from, to string) ([]string, error) {
	paths, err := m.copiedOf(path)
	if err != nil || len(paths) == 0 {
		return nil, err
	}
	args := append([]string{"log", "-z", "--full-history", "--no-renames", "--format=", "--name-only", from + ".." + to, "--"}, paths...)
	out, err := m.git(ctx, l, args...)
	if err != nil {
		return nil, fmt.Errorf("look for copied files in the merge: %w", err)
	}
	var found []string
	for _, p := range strings.Split(out, "\x00") {
		if p = strings.Trim(p, "\n"); p != "" {
			found = append(found, p)
		}
	}
	found = dedupe(found)
	sort.Strings(found)
	return found, nil
}
