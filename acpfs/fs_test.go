package acpfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// auditLog collects the Ops an FS reports.
type auditLog struct {
	mu  sync.Mutex
	ops []Op
}

func (a *auditLog) record(op Op) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ops = append(a.ops, op)
}

func (a *auditLog) last(t *testing.T) Op {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ops) == 0 {
		t.Fatal("no audit record")
	}
	return a.ops[len(a.ops)-1]
}

// newTestFS opens an FS on a fresh tree with cfg's limits and an audit log.
func newTestFS(t *testing.T, cfg FSConfig) (*FS, tree, *auditLog) {
	t.Helper()
	tr := makeTree(t)
	log := &auditLog{}
	cfg.Root = tr.root
	cfg.Audit = log.record
	f, err := NewFS(cfg)
	if err != nil {
		t.Fatalf("NewFS(%+v) error = %v", cfg, err)
	}
	t.Cleanup(func() { f.Close() })
	return f, tr, log
}

func ptr(n int) *int { return &n }

func TestReadTextFileLines(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{})
	ctx := context.Background()
	files := map[string]string{
		"lines.txt":  "one\ntwo\nthree\n",
		"noeol.txt":  "one\ntwo\nthree",
		"crlf.txt":   "one\r\ntwo\r\n",
		"empty.txt":  "",
		"utf8.txt":   "héllo\nwörld €\n",
		"blanks.txt": "\n\n\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tr.root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		file        string
		line, limit *int
		want        string
	}{
		{"lines.txt", nil, nil, "one\ntwo\nthree\n"},
		{"lines.txt", ptr(1), nil, "one\ntwo\nthree\n"},
		{"lines.txt", ptr(2), nil, "two\nthree\n"},
		{"lines.txt", ptr(2), ptr(1), "two\n"},
		{"lines.txt", nil, ptr(2), "one\ntwo\n"},
		{"lines.txt", ptr(3), ptr(5), "three\n"},
		{"lines.txt", ptr(4), nil, ""},
		{"lines.txt", ptr(100), ptr(1), ""},
		{"lines.txt", ptr(0), nil, "one\ntwo\nthree\n"},
		{"lines.txt", ptr(-3), ptr(1), "one\n"},
		{"lines.txt", nil, ptr(0), "one\ntwo\nthree\n"},
		{"noeol.txt", ptr(3), nil, "three"},
		{"noeol.txt", ptr(2), ptr(2), "two\nthree"},
		{"noeol.txt", ptr(4), nil, ""},
		{"crlf.txt", ptr(2), nil, "two\r\n"},
		{"empty.txt", nil, nil, ""},
		{"empty.txt", ptr(2), nil, ""},
		{"utf8.txt", ptr(2), nil, "wörld €\n"},
		{"blanks.txt", ptr(2), ptr(1), "\n"},
		{"link-in", nil, nil, "alpha\n"},
		{"link-abs-in", nil, nil, "alpha\n"},
		{"dir/up/dir/b.txt", nil, nil, "beta\n"},
		{".git/HEAD", nil, nil, "ref: refs/heads/main\n"},
	}
	for _, tt := range tests {
		p := filepath.Join(tr.root, tt.file)
		got, err := f.ReadTextFile(ctx, p, tt.line, tt.limit)
		if err != nil || got != tt.want {
			t.Errorf("ReadTextFile(%q, line %v, limit %v) = %q, %v; want %q, nil", tt.file, deref(tt.line), deref(tt.limit), got, err, tt.want)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestReadTextFileRefusals(t *testing.T) {
	f, tr, log := newTestFS(t, FSConfig{MaxFileSize: 16})
	ctx := context.Background()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(tr.root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("at-limit.txt", strings.Repeat("x", 16))
	write("big.txt", strings.Repeat("x", 17))
	write("nul.txt", "abc\x00def")
	write("latin1.txt", "caf\xe9\n")
	write("cut.txt", "euro \xe2\x82")
	if err := syscall.Mkfifo(filepath.Join(tr.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path  string
		wantErr     error
		wantOutcome string
		wantPath    string
	}{
		{"at limit", tr.root + "/at-limit.txt", nil, OutcomeOK, "at-limit.txt"},
		{"over limit", tr.root + "/big.txt", ErrTooLarge, OutcomeRefused, "big.txt"},
		{"nul byte", tr.root + "/nul.txt", ErrNotText, OutcomeRefused, "nul.txt"},
		{"invalid utf-8", tr.root + "/latin1.txt", ErrNotText, OutcomeRefused, "latin1.txt"},
		{"cut utf-8", tr.root + "/cut.txt", ErrNotText, OutcomeRefused, "cut.txt"},
		{"directory", tr.root + "/dir", ErrIsDirectory, OutcomeRefused, "dir"},
		{"root", tr.root, ErrIsDirectory, OutcomeRefused, "."},
		{"fifo", tr.root + "/fifo", ErrNotRegular, OutcomeRefused, "fifo"},
		{"missing", tr.root + "/missing.txt", ErrNotFound, OutcomeNotFound, "missing.txt"},
		{"missing dir", tr.root + "/nodir/x.txt", ErrNotFound, OutcomeNotFound, "nodir/x.txt"},
		{"under a file", tr.root + "/a.txt/x", ErrNotDirectory, OutcomeRefused, "a.txt/x"},
		{"dangling link", tr.root + "/dangling", ErrNotFound, OutcomeNotFound, "dangling"},
		{"outside", tr.root + "/../outside/canary.txt", ErrOutsideRoot, OutcomeRefused, tr.root + "/../outside/canary.txt"},
		{"symlink out", tr.root + "/link-out-file", ErrOutsideRoot, OutcomeRefused, "link-out-file"},
		{"symlinked dir out", tr.root + "/link-out-dir/canary.txt", ErrOutsideRoot, OutcomeRefused, "link-out-dir/canary.txt"},
		{"relative", "a.txt", ErrRelativePath, OutcomeRefused, "a.txt"},
		{"loop", tr.root + "/loop1", ErrSymlinkLoop, OutcomeRefused, "loop1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.ReadTextFile(ctx, tt.path, nil, nil)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("ReadTextFile(%q) = %q, %v; want error %v", tt.path, got, err, tt.wantErr)
			}
			if err != nil && got != "" {
				t.Errorf("ReadTextFile(%q) content = %q with an error; want empty", tt.path, got)
			}
			op := log.last(t)
			if op.Type != OpRead || op.Outcome != tt.wantOutcome || op.Path != tt.wantPath || (err != nil) != (op.Error != "") {
				t.Errorf("audit of ReadTextFile(%q) = %+v; want type %s, outcome %s, path %q", tt.path, op, OpRead, tt.wantOutcome, tt.wantPath)
			}
		})
	}
	tr.checkOutside(t)
}

func TestReadMissingNotFoundIsResourceNotFound(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{})
	_, err := f.ReadTextFile(context.Background(), tr.root+"/nope.txt", nil, nil)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadTextFile(missing) error = %v; want ErrNotFound and fs.ErrNotExist", err)
	}
}

func TestReadMissingFileEmpty(t *testing.T) {
	f, tr, log := newTestFS(t, FSConfig{MissingFileEmpty: true})
	got, err := f.ReadTextFile(context.Background(), tr.root+"/nope.txt", nil, nil)
	if err != nil || got != "" {
		t.Fatalf("ReadTextFile(missing) with MissingFileEmpty = %q, %v; want \"\", nil", got, err)
	}
	if op := log.last(t); op.Outcome != OutcomeNotFound {
		t.Errorf("audit outcome = %q; want %q", op.Outcome, OutcomeNotFound)
	}
	// Refusals are still refusals.
	if _, err := f.ReadTextFile(context.Background(), tr.root+"/link-out-file", nil, nil); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("ReadTextFile(link-out-file) error = %v; want ErrOutsideRoot", err)
	}
}

func TestReadAudit(t *testing.T) {
	f, tr, log := newTestFS(t, FSConfig{})
	if _, err := f.ReadTextFile(context.Background(), tr.root+"/dir/b.txt", nil, nil); err != nil {
		t.Fatal(err)
	}
	want := Op{Type: OpRead, Path: "dir/b.txt", Bytes: 5, Outcome: OutcomeOK}
	if diff := cmp.Diff(want, log.last(t), cmpopts.IgnoreFields(Op{}, "Duration")); diff != "" {
		t.Errorf("audit of a read (-want +got):\n%s", diff)
	}
	if log.last(t).Duration <= 0 {
		t.Errorf("audit Duration = %v; want > 0", log.last(t).Duration)
	}
}

func TestFSCancelledContext(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.ReadTextFile(ctx, tr.root+"/a.txt", nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadTextFile(cancelled) error = %v; want context.Canceled", err)
	}
	if err := f.WriteTextFile(ctx, tr.root+"/c.txt", "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteTextFile(cancelled) error = %v; want context.Canceled", err)
	}
	if _, err := os.Stat(tr.root + "/c.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cancelled write created the file: %v", err)
	}
}

func TestNewFSErrors(t *testing.T) {
	tr := makeTree(t)
	for _, cfg := range []FSConfig{{}, {Root: tr.root + "/missing"}, {Root: tr.root, MaxFileSize: -1}} {
		if f, err := NewFS(cfg); err == nil {
			f.Close()
			t.Errorf("NewFS(%+v) error = nil; want an error", cfg)
		}
	}
	f, err := NewFS(FSConfig{Root: tr.root})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.cfg.MaxFileSize != DefaultMaxFileSize || f.Guard().Root() != tr.root {
		t.Errorf("NewFS defaults: MaxFileSize %d, root %q; want %d, %q", f.cfg.MaxFileSize, f.Guard().Root(), DefaultMaxFileSize, tr.root)
	}
}
