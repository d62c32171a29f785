package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

// patchSource names a merge patch in diagnostics.
const patchSource = "merge patch"

// newFileMode is the mode of a providers file that Patch creates: it may
// hold secrets in "env".
const newFileMode fs.FileMode = 0o600

// Patch applies an RFC 7396 JSON Merge Patch to the entry of provider id
// in the providers file: fields in mergePatch replace those of the entry,
// a null removes one, the others stay; a null mergePatch removes the entry
// (a built-in goes back to its defaults). The whole resulting file is
// validated before anything is written; it is then written atomically,
// keeping the file's mode (or 0600 for a new file), and applied at once.
//
// ifMatch, unless "", must be the ETag of the file as it is on disk (from
// Snapshot or a previous Patch; quoted, weak or bare forms are accepted, "*"
// means "the file exists"), or Patch fails with ErrPreconditionFailed and
// writes nothing: an edit made by hand meanwhile is never overwritten
// silently. An invalid patch or result is reported as *ValidationError
// values (errors.As) and nothing is written. Patch returns the ETag of the
// file as written.
func (r *Registry) Patch(ctx context.Context, id string, mergePatch []byte, ifMatch string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("patch %q: %w", id, err)
	}
	if r.cfg.Path == "" {
		return "", fmt.Errorf("patch %q: %w", id, ErrNoFile)
	}
	path := joinPath("providers", id)
	if msg := checkID(id); msg != "" {
		return "", &ValidationError{File: patchSource, Path: path, Line: 1, Col: 1, Msg: msg}
	}
	if _, perr := parseTree(mergePatch); perr != nil {
		line, col := lineCol(mergePatch, perr.off)
		return "", &ValidationError{File: patchSource, Path: perr.path, Line: line, Col: col, Msg: perr.msg}
	}

	r.patchMu.Lock()
	defer r.patchMu.Unlock()
	target := r.cfg.Path
	if real, err := filepath.EvalSymlinks(target); err == nil {
		target = real // keep a symlinked file a symlink
	}
	if rd, ok := r.vet(r.cfg.Path); !ok {
		return "", fmt.Errorf("patch %q: %s (fix that, then try again): %w", id, rd.err, ErrConfig)
	}
	rd := readPath(target)
	if rd.err != "" {
		// Not a config a patch can apply to (a directory, an unreadable
		// file): a problem of the config, for the user to fix.
		return "", fmt.Errorf("patch %q: cannot read %s: %s (fix or remove it, then try again): %w", id, target, rd.err, ErrConfig)
	}
	cur := rd.etag()
	if !etagMatches(ifMatch, cur, rd.exists) {
		return "", fmt.Errorf("patch %q: %s has ETag %s, not %s: %w", id, r.cfg.Path, cur, ifMatch, ErrPreconditionFailed)
	}
	doc := rd.data
	if !rd.exists {
		// A patch changes the config in force: the last good file's when
		// the file went missing while the registry ran, else the
		// built-ins' (an empty document).
		r.mu.Lock()
		doc = r.good
		r.mu.Unlock()
		if doc == nil {
			doc = fmt.Appendf(nil, `{"version": %d, "providers": {}}`, FileVersion)
		}
	}
	root, perr := parseTree(doc)
	if perr != nil {
		line, col := lineCol(doc, perr.off)
		return "", &ValidationError{File: r.cfg.Path, Path: perr.path, Line: line, Col: col,
			Msg: perr.msg + " (fix the file by hand: a merge patch needs valid JSON)"}
	}
	if err := r.checkKnown(id, root, mergePatch); err != nil {
		return "", err
	}
	key, _ := json.Marshal(id)
	wrapped := fmt.Appendf(nil, `{"providers": {%s: %s}}`, key, mergePatch)
	merged, err := jsonpatch.MergePatch(doc, wrapped)
	if err != nil {
		return "", fmt.Errorf("patch %q: merge: %w", id, err)
	}
	tree, perr := parseTree(merged)
	if perr != nil {
		return "", fmt.Errorf("patch %q: merge produced invalid JSON: %s", id, perr.msg)
	}
	out := tree.format()
	if _, err := parseDocument(r.cfg.Path+" (as patched)", out, builtins(r.cfg.SelfPath)); err != nil {
		return "", err
	}
	if rd.exists {
		if old, perr := parseTree(rd.data); perr == nil && bytes.Equal(old.format(), out) {
			return cur, nil // nothing changes: leave the file as it is
		}
	}
	mode := newFileMode
	if fi, err := os.Stat(target); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := writeAtomic(target, out, mode); err != nil {
		return "", fmt.Errorf("patch %q: %w", id, err)
	}
	r.log.Info("providers file patched", logProvider, id)
	r.mu.Lock()
	if !r.closed {
		_ = r.applyLocked(readResult{exists: true, data: out}, false) // valid: checked above
	}
	r.mu.Unlock()
	return ETagOf(out), nil
}

// checkKnown refuses a patch of a provider that neither is built in nor has
// an entry in the document root, unless the patch looks like the
// definition of a new one (it sets "extends" or "command"; the document's
// validation then says what else a new provider needs): "providers disable
// gemni" is a typo to point out, not a new provider to create.
func (r *Registry) checkKnown(id string, root *node, mergePatch []byte) error {
	known := make([]string, 0, 16)
	for _, d := range builtins(r.cfg.SelfPath) {
		known = append(known, d.id)
	}
	if provs := root.member("providers"); provs != nil {
		for _, m := range provs.members {
			known = append(known, m.key)
		}
	}
	if slices.Contains(known, id) {
		return nil
	}
	if p, _ := parseTree(mergePatch); p != nil && (p.member("extends") != nil || p.member("command") != nil) {
		return nil
	}
	slices.Sort(known)
	known = slices.Compact(known)
	return errorOf(ErrUnknown, "unknown provider %q%s (known: %s; a new provider needs \"extends\")",
		id, didYouMean(id, known), strings.Join(known, ", "))
}

// readPath reads the file at p, at most maxFileSize+1 bytes of it (the
// parser rejects a longer file). A missing file is not an error.
func readPath(p string) readResult {
	f, err := os.Open(p)
	if err != nil {
		if missing(err) {
			return readResult{}
		}
		return readResult{exists: true, err: err.Error()}
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return readResult{exists: true, err: "it is a directory, not a file"}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return readResult{exists: true, err: err.Error()}
	}
	return readResult{exists: true, data: data}
}

// etagMatches applies HTTP If-Match semantics to one entity tag.
func etagMatches(ifMatch, cur string, exists bool) bool {
	switch ifMatch = strings.TrimSpace(ifMatch); ifMatch {
	case "":
		return true
	case "*":
		return exists
	}
	bare := func(s string) string { return strings.Trim(strings.TrimPrefix(s, "W/"), `"`) }
	return bare(ifMatch) == bare(cur)
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, written, given mode perm, synced, renamed over path, and the
// directory synced, so that readers see the old file or the new one, never
// a mix, even after a crash.
func writeAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: the rename is done
		_ = d.Close()
	}
	return nil
}
