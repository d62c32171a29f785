package acpfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// wantLines is the reference of line selection: limit lines from the
// 1-based line, endings kept.
func wantLines(s string, line, limit *int) string {
	if line != nil {
		for skip := *line - 1; skip > 0; skip-- {
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		}
	}
	if limit != nil && *limit > 0 {
		end := 0
		for n := *limit; n > 0 && end < len(s); n-- {
			i := strings.IndexByte(s[end:], '\n')
			if i < 0 {
				return s
			}
			end += i + 1
		}
		s = s[:end]
	}
	return s
}

// Files larger than a chunk, with characters split across the chunk
// boundaries, read whole or by lines, give what a read of the whole file
// would, in pieces that end on character boundaries and are at most a
// chunk (and a split character) long.
func TestReadInPieces(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{})
	ctx := context.Background()
	var sb strings.Builder
	for i := 0; sb.Len() < 3*ReadChunk+100; i++ {
		sb.WriteString(strings.Repeat("é€🎉x", i%50))
		sb.WriteByte('\n')
	}
	text := sb.String()
	for _, name := range []string{"big.txt", "odd.txt"} {
		content := text
		if name == "odd.txt" {
			content = "ab" + text + "no newline at the end €"
		}
		p := filepath.Join(tr.root, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		lines := strings.Count(content, "\n")
		for _, sel := range [][2]*int{{nil, nil}, {ptr(2), nil}, {ptr(lines / 2), ptr(lines / 3)}, {ptr(lines), ptr(5)},
			{ptr(lines + 1), nil}, {ptr(lines + 2), nil}, {nil, ptr(1)}, {ptr(0), ptr(-1)}} {
			want := wantLines(content, sel[0], sel[1])
			var got strings.Builder
			err := f.ReadTextFileFunc(ctx, p, sel[0], sel[1], func(c *Content) error {
				if c.Len() != int64(len(want)) {
					t.Errorf("%s %v: Len %d; want %d", name, sel, c.Len(), len(want))
				}
				return c.Each(func(piece []byte) error {
					if len(piece) > ReadChunk+utf8.UTFMax-1 || !utf8.Valid(piece) {
						t.Errorf("%s %v: a piece of %d bytes, valid UTF-8 %v", name, sel, len(piece), utf8.Valid(piece))
					}
					got.Write(piece)
					return nil
				})
			})
			if err != nil || got.String() != want {
				t.Errorf("%s line %v limit %v: %d bytes, %v; want %d bytes", name, deref(sel[0]), deref(sel[1]), got.Len(), err, len(want))
			}
		}
	}
}

// A NUL byte or invalid UTF-8 past the first chunk, a character split by
// the end of the file, and a file above the limit are refused.
func TestReadRefusesPastFirstChunk(t *testing.T) {
	f, tr, _ := newTestFS(t, FSConfig{MaxFileSize: 4 * ReadChunk})
	big := strings.Repeat("€", ReadChunk) // 3 bytes each: splits at every chunk
	for name, tt := range map[string]struct {
		content string
		err     error
	}{
		"nul.txt":     {big[:2*ReadChunk] + "\x00", ErrNotText},
		"invalid.txt": {big[:ReadChunk+1] + "\xff" + big[:30], ErrNotText},
		"split.txt":   {big[:ReadChunk*2] + "\xe2\x82", ErrNotText},
		"large.txt":   {strings.Repeat("x", 4*ReadChunk+1), ErrTooLarge},
	} {
		p := filepath.Join(tr.root, name)
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadTextFile(context.Background(), p, nil, nil); !errors.Is(err, tt.err) {
			t.Errorf("%s: %v; want %v", name, err, tt.err)
		}
	}
}
