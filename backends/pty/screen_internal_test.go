package pty

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScreenRender(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string
	}{
		{"prompt keeps its space up to the cursor", []string{"out\r\n> "}, "out\n> "},
		{"trailing blanks trimmed off the cursor row", []string{"a   \r\nb"}, "a\nb"},
		{"colours do not show", []string{"\x1b[1;31mred\x1b[0m \x1b[38;5;208mx\x1b[38;2;1;2;3my\x1b[0m"}, "red xy"},
		{"cursor movement", []string{"line1\r\nline2\x1b[1;3HX\x1b[2;6H"}, "liXe1\nline2"},
		{"clear line", []string{"spinner\r\x1b[Kdone"}, "done"},
		{"rune split across writes", []string{"caf\xc3", "\xa9 \xe2\x82", "\xac \xf0\x9f", "\x98\x80"}, "café € 😀"},
		{"rune split at every byte", []string{"\xe2", "\x82", "\xac!"}, "€!"},
		{"invalid byte", []string{"a\xffb"}, "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScreen(20, 4, nil)
			for _, c := range tt.chunks {
				s.write([]byte(c))
			}
			if got := s.text(); got != tt.want {
				t.Errorf("text() after %q = %q; want %q", tt.chunks, got, tt.want)
			}
		})
	}
}

func TestBracketedPasteMode(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   bool
	}{
		{"off by default", []string{"hello"}, false},
		{"on", []string{"\x1b[?2004h$ "}, true},
		{"on then off", []string{"\x1b[?2004h", "x\x1b[?2004l"}, false},
		{"off then on in one chunk", []string{"\x1b[?2004l\x1b[?2004h"}, true},
		{"split across chunks", []string{"abc\x1b[?20", "04h$ "}, true},
		{"split into single bytes", strings.Split("\x1b[?2004h", ""), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScreen(20, 4, nil)
			for _, c := range tt.chunks {
				s.write([]byte(c))
			}
			if s.bracketed != tt.want {
				t.Errorf("bracketed after %q = %v; want %v", tt.chunks, s.bracketed, tt.want)
			}
		})
	}
}

// TestRedrawReproducesScreen paints a screen with colours, attributes and
// cursor moves, then feeds its redraw to a fresh emulator: every cell,
// colour and the cursor must come out the same.
func TestRedrawReproducesScreen(t *testing.T) {
	src := newScreen(30, 6, nil)
	src.write([]byte("\x1b[?2004h\x1b[1;32mbold green\x1b[0m plain\r\n" +
		"\x1b[7mreverse\x1b[0m \x1b[4;34munder\x1b[0m\r\n" +
		"\x1b[38;5;208m256\x1b[48;2;10;20;30mrgb\x1b[0m\r\n" +
		"\x1b[5;10Hmoved\x1b[3;4H"))
	dst := newScreen(30, 6, nil)
	dst.write(src.redraw())
	if diff := cmp.Diff(src.text(), dst.text()); diff != "" {
		t.Errorf("redraw text mismatch (-src +dst):\n%s", diff)
	}
	for y := 0; y < 6; y++ {
		for x := 0; x < 30; x++ {
			a, b := src.vt.Cell(x, y), dst.vt.Cell(x, y)
			if a.Char != b.Char || a.FG != b.FG || a.BG != b.BG || a.Mode != b.Mode {
				t.Errorf("cell (%d,%d) = %+v after redraw; want %+v", x, y, b, a)
			}
		}
	}
	if src.cursor() != dst.cursor() {
		t.Errorf("cursor after redraw = %+v; want %+v", dst.cursor(), src.cursor())
	}
	if !dst.bracketed {
		t.Error("redraw lost bracketed paste mode")
	}
}

func TestScreenAnswersCursorQuery(t *testing.T) {
	var replies bytes.Buffer
	s := newScreen(20, 4, &replies)
	s.write([]byte("ab\r\ncd\x1b[6n"))
	if got, want := replies.String(), "\x1b[2;3R"; got != want {
		t.Errorf("answer to a cursor position query = %q; want %q", got, want)
	}
}

func TestScreenTail(t *testing.T) {
	s := newScreen(20, 6, nil)
	s.write([]byte("one\r\n\r\ntwo\r\nthree\r\n"))
	if got, want := s.tail(2), "two\nthree"; got != want {
		t.Errorf("tail(2) = %q; want %q", got, want)
	}
}
