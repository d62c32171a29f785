package acpfs

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultMaxFileSize is the size limit of reads and writes when
// FSConfig.MaxFileSize is zero: 100 MiB.
const DefaultMaxFileSize int64 = 100 << 20

// Defaults of the read bounds of FSConfig.
const (
	// DefaultMaxReads is how many reads of one FS run at once.
	DefaultMaxReads = 4
	// DefaultReadBudget bounds the memory of the reads in flight: 64 MiB.
	DefaultReadBudget int64 = 64 << 20
)

// Op types and outcomes reported to FSConfig.Audit.
const (
	OpRead  = "fs.read"
	OpWrite = "fs.write"

	OutcomeOK       = "ok"
	OutcomeRefused  = "refused"
	OutcomeError    = "error"
	OutcomeNotFound = "not_found"
)

// Op is one fs bridge operation, the audit record of FS.
type Op struct {
	// Type is OpRead or OpWrite.
	Type string `json:"type"`
	// Path is relative to the worktree root, or the raw agent path when the
	// guard refused it before it could be made relative.
	Path string `json:"path"`
	// Bytes is the content returned by a read or given to a write.
	Bytes int64 `json:"bytes"`
	// Outcome is OutcomeOK, OutcomeRefused, OutcomeError or OutcomeNotFound.
	Outcome string `json:"outcome"`
	// Error is the error text when Outcome is not OutcomeOK.
	Error string `json:"error,omitempty"`
	// Duration is how long the operation took.
	Duration time.Duration `json:"duration"`
}

// FSConfig configures an FS.
type FSConfig struct {
	// Root is the worktree the FS is confined to. Required.
	Root string
	// MaxFileSize limits reads and writes, in bytes (0 = DefaultMaxFileSize).
	MaxFileSize int64
	// MissingFileEmpty answers a read of a missing file with empty content
	// instead of ErrNotFound (a provider compatibility switch).
	MissingFileEmpty bool
	// Audit, if set, is called once per operation, after it ends, on the
	// caller's goroutine. It must not block for long.
	Audit func(Op)
	// MaxReads caps the reads running at once; more wait (0 =
	// DefaultMaxReads).
	MaxReads int
	// ReadBudget caps the bytes held by the reads in flight, until their
	// answers are written; a read holds a buffer of at most ReadChunk
	// bytes, whatever the file's size, and counts it twice (the piece and
	// its encoded answer, see ReadChunk), waiting until that fits (0 =
	// DefaultReadBudget).
	ReadBudget int64
}

// FS answers ACP fs/read_text_file and fs/write_text_file inside one
// worktree. It is safe for concurrent use.
type FS struct {
	cfg   FSConfig
	guard *Guard
	// slots bounds the reads running at once; bytes their memory.
	slots chan struct{}
	bytes *budget
}

// NewFS opens an FS on cfg.Root.
func NewFS(cfg FSConfig) (*FS, error) {
	if cfg.MaxFileSize == 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	if cfg.MaxReads == 0 {
		cfg.MaxReads = DefaultMaxReads
	}
	if cfg.ReadBudget == 0 {
		cfg.ReadBudget = DefaultReadBudget
	}
	switch {
	case cfg.MaxFileSize < 0:
		return nil, fmt.Errorf("fs: negative max file size %d", cfg.MaxFileSize)
	case cfg.MaxReads < 0:
		return nil, fmt.Errorf("fs: negative max reads %d", cfg.MaxReads)
	case cfg.ReadBudget < 0:
		return nil, fmt.Errorf("fs: negative read budget %d", cfg.ReadBudget)
	}
	g, err := NewGuard(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("fs: %w", err)
	}
	return &FS{cfg: cfg, guard: g, slots: make(chan struct{}, cfg.MaxReads), bytes: &budget{size: cfg.ReadBudget}}, nil
}

// Guard returns the FS's guard, e.g. for a Terminals of the same worktree.
// It is closed with the FS.
func (f *FS) Guard() *Guard { return f.guard }

// Close closes the FS and its Guard.
func (f *FS) Close() error { return f.guard.Close() }

// ReadTextFile returns the text of the file at the absolute agent path,
// from the 1-based line (nil or below 1: from the start) for limit lines
// (nil or below 1: to the end); line endings are kept, and a line past the
// end gives empty content. Errors wrap the Guard's errors, ErrNotFound (a
// missing file, unless MissingFileEmpty), ErrNotDirectory (a file on the way
// to it), ErrIsDirectory, ErrNotRegular, ErrTooLarge, ErrNotText, or the
// error of ctx's Authorizer (ErrPermissionDenied). A cancelled ctx stops the
// read before it starts.
//
// At most FSConfig.MaxReads reads run at once, within FSConfig.ReadBudget;
// the others wait, and a cancelled ctx ends the wait.
func (f *FS) ReadTextFile(ctx context.Context, path string, line, limit *int) (string, error) {
	var text string
	err := f.ReadTextFileFunc(ctx, path, line, limit, func(c *Content) error {
		var err error
		text, err = c.String()
		return err
	})
	return text, err
}

// ReadTextFileFunc is ReadTextFile that lends the content to use, on the
// caller's goroutine, instead of returning it: the content is not held in
// memory but read again from the file as use consumes it (Content.Each),
// and the read keeps its slot and its share of the read budget until use
// returns, so that what use makes of the content (the encoded answer to the
// agent, written piece by piece) is bounded with it (see ReadChunk). use
// must not keep the content; it is not called when the read fails, and its
// error is returned as it is.
func (f *FS) ReadTextFileFunc(ctx context.Context, path string, line, limit *int, use func(*Content) error) error {
	start := time.Now()
	c, rel, release, err := f.read(ctx, path, line, limit)
	if err != nil && errors.Is(err, ErrNotFound) && f.cfg.MissingFileEmpty {
		f.audit(OpRead, path, rel, 0, err, start)
		return use(&Content{})
	}
	if err != nil {
		f.audit(OpRead, path, rel, 0, err, start)
		return err
	}
	f.audit(OpRead, path, rel, c.Len(), nil, start)
	defer release()
	return use(c)
}

// WriteTextFile replaces the file at the absolute agent path with content:
// parent directories are created, the file is written to a temporary file in
// the same directory, synced and renamed over the old one, whose permission
// bits are kept (0644 for a new file). Empty content makes an empty file.
// Errors wrap the Guard's errors, ErrGitDir, ErrIsDirectory, ErrNotRegular,
// ErrNotDirectory (a file where a directory is needed), ErrTooLarge, or the
// error of ctx's Authorizer (ErrPermissionDenied). A cancelled ctx stops the
// write before it starts.
func (f *FS) WriteTextFile(ctx context.Context, path, content string) error {
	start := time.Now()
	rel, err := f.write(ctx, path, content)
	f.audit(OpWrite, path, rel, int64(len(content)), err, start)
	return err
}

// audit reports one operation to cfg.Audit.
func (f *FS) audit(typ, path, rel string, n int64, err error, start time.Time) {
	if f.cfg.Audit == nil {
		return
	}
	op := Op{Type: typ, Path: rel, Bytes: n, Outcome: outcome(err), Duration: time.Since(start)}
	if rel == "" {
		op.Path = path
	}
	if err != nil {
		op.Error = err.Error()
		op.Bytes = 0
	}
	f.cfg.Audit(op)
}

// outcome classifies err for an Op.
func outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrRelativePath), errors.Is(err, ErrOutsideRoot),
		errors.Is(err, ErrNulByte), errors.Is(err, ErrSymlinkLoop),
		errors.Is(err, ErrGitDir), errors.Is(err, ErrTooLarge),
		errors.Is(err, ErrNotText), errors.Is(err, ErrIsDirectory),
		errors.Is(err, ErrNotRegular), errors.Is(err, ErrNotDirectory),
		errors.Is(err, ErrPermissionDenied):
		return OutcomeRefused
	}
	return OutcomeError
}
