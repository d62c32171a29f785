package catalog

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// snapshot is the registry document built into the binary: the public ACP
// registry's agents, plus the agents agentpool offered before it read the
// registry (goose, Amp).
//
//go:embed registry.json
var snapshot []byte

// Builtin returns the registry document built into the binary.
func Builtin() *Document {
	doc, err := Parse(snapshot)
	if err != nil {
		// A test parses the snapshot: this cannot happen in a build.
		panic(fmt.Sprintf("catalog: the built-in snapshot is invalid: %v", err))
	}
	return doc
}

// Sources of a Catalog's document, as View reports them.
const (
	SourceBuiltin = "builtin"
	SourceFile    = "file"
)

// Config configures a Store.
type Config struct {
	// Path is the file that keeps a catalog the user gave (mode 0600,
	// written atomically). "" keeps it in memory only.
	Path string
	// Platform selects binary distributions. Default: Platform().
	Platform string
	// Logger reports a stored catalog that could not be read (default
	// slog.Default()).
	Logger *slog.Logger
}

// Store is the daemon's catalog: the built-in snapshot until the user
// replaces it with Put. It is safe for concurrent use.
type Store struct {
	cfg Config

	mu      sync.Mutex
	doc     *Document
	source  string
	updated time.Time
}

// View is the catalog as the API shows it.
type View struct {
	// Source is SourceBuiltin or SourceFile.
	Source string `json:"source"`
	// File is the stored document's path when Source is SourceFile.
	File string `json:"file,omitempty"`
	// Updated is when the stored document was written.
	Updated time.Time `json:"updated,omitzero"`
	// Version is the document's format version.
	Version  string  `json:"version"`
	Platform string  `json:"platform"`
	Agents   []Entry `json:"agents"`
}

// Open returns the Store of cfg: the document stored at cfg.Path when it
// is there and valid, else the built-in snapshot (a stored document that
// cannot be read or parsed is logged and ignored, never fatal).
func Open(cfg Config) *Store {
	if cfg.Platform == "" {
		cfg.Platform = Platform()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg, doc: Builtin(), source: SourceBuiltin}
	if cfg.Path == "" {
		return s
	}
	data, err := os.ReadFile(cfg.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return s
	}
	if err == nil {
		var doc *Document
		if doc, err = Parse(data); err == nil {
			s.doc, s.source = doc, SourceFile
			if st, serr := os.Stat(cfg.Path); serr == nil {
				s.updated = st.ModTime()
			}
			return s
		}
	}
	cfg.Logger.Warn("the stored catalog is ignored: the built-in one is used", "file", cfg.Path, "err", err)
	return s
}

// View returns the catalog's entries for the store's platform.
func (s *Store) View() View {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := View{Source: s.source, Updated: s.updated, Version: s.doc.Version, Platform: s.cfg.Platform,
		Agents: s.doc.Entries(s.cfg.Platform)}
	if s.source == SourceFile {
		v.File = s.cfg.Path
	}
	return v
}

// Put checks data as a registry document and makes it the catalog,
// storing it first. A document Parse refuses returns its error (matching
// ErrInvalid) and the catalog stays as it was; so does a failed write.
func (s *Store) Put(data []byte) (View, error) {
	doc, err := Parse(data)
	if err != nil {
		return View{}, err
	}
	s.mu.Lock()
	now := time.Now()
	if s.cfg.Path != "" {
		if err := writeAtomic(s.cfg.Path, data, 0o600); err != nil {
			s.mu.Unlock()
			return View{}, fmt.Errorf("store the catalog: %w", err)
		}
	}
	s.doc, s.source, s.updated = doc, SourceFile, now
	s.mu.Unlock()
	return s.View(), nil
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, synced and renamed over path, so that a reader sees the old
// document or the new one.
func writeAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
