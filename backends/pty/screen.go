package pty

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hinshun/vt10x"
)

// Glyph mode bits of vt10x (unexported there).
const (
	glyphReverse   = 1 << 0
	glyphUnderline = 1 << 1
	glyphBold      = 1 << 2
	glyphItalic    = 1 << 4
	glyphBlink     = 1 << 5
)

var (
	bracketMode = []byte("\x1b[?2004") // then h (set) or l (reset)
	bracketOn   = []byte("\x1b[?2004h")
)

// Cursor is a position on the screen, from 0.
type Cursor struct {
	X       int  `json:"x"`
	Y       int  `json:"y"`
	Visible bool `json:"visible"`
}

// ScreenData is the payload of pty.screen: the rendered screen.
type ScreenData struct {
	// Text is the screen, one line per row, trailing blanks trimmed
	// except up to the cursor on its row.
	Text      string `json:"text"`
	Cols      int    `json:"cols"`
	Rows      int    `json:"rows"`
	Cursor    Cursor `json:"cursor"`
	Title     string `json:"title,omitempty"`
	AltScreen bool   `json:"alt_screen,omitempty"`
}

// OutputData is the payload of pty.output: raw terminal output, base64 in
// JSON. Dropped counts the bytes of the same interval beyond the limit.
type OutputData struct {
	Bytes   []byte `json:"bytes"`
	Dropped int    `json:"dropped,omitempty"`
}

// screen is the terminal emulator with what the backend needs on top: whole
// runes only, the bracketed-paste mode the program asked for, and
// renderings as text and as a redraw sequence. It is not safe for
// concurrent use; the backend guards it with termMu.
type screen struct {
	vt        vt10x.Terminal
	filter    csiFilter // drops sequences vt10x would misread
	carry     []byte    // the start of a rune split across reads
	modeTail  []byte    // the end of the previous chunk, for split mode sequences
	bracketed bool
	buf       []byte // reused rendering
}

func newScreen(cols, rows int, replies io.Writer) *screen {
	if replies == nil {
		replies = io.Discard
	}
	return &screen{vt: vt10x.New(vt10x.WithSize(cols, rows), vt10x.WithWriter(replies))}
}

// write feeds output to the emulator, less the control sequences it
// would misread (see csiFilter). A rune split across two writes is held
// back until it is complete (the emulator would garble it).
func (s *screen) write(p []byte) {
	s.trackModes(p)
	p = s.filter.apply(p)
	if len(s.carry) > 0 {
		p = append(s.carry, p...) // rare: only after a split rune
		s.carry = nil
	}
	complete, rest := splitIncomplete(p)
	if len(complete) > 0 {
		_, _ = s.vt.Write(complete)
	}
	if len(rest) > 0 {
		s.carry = append([]byte(nil), rest...)
	}
}

// splitIncomplete splits p before a trailing incomplete UTF-8 sequence.
func splitIncomplete(p []byte) (complete, rest []byte) {
	for i := len(p) - 1; i >= 0 && i >= len(p)-3; i-- {
		c := p[i]
		if c < 0x80 {
			return p, nil
		}
		if c >= 0xC0 { // a leading byte
			if utf8.FullRune(p[i:]) {
				return p, nil
			}
			return p[:i], p[i:]
		}
	}
	return p, nil
}

// trackModes follows the bracketed-paste mode, which the emulator ignores.
func (s *screen) trackModes(p []byte) {
	if len(s.modeTail) > 0 {
		head := p
		if len(head) > len(bracketOn) {
			head = head[:len(bracketOn)]
		}
		edge := append(append([]byte(nil), s.modeTail...), head...)
		s.applyModes(edge)
	}
	s.applyModes(p)
	keep := len(bracketOn) - 1
	if len(p) >= keep {
		s.modeTail = append(s.modeTail[:0], p[len(p)-keep:]...)
	} else {
		s.modeTail = append(s.modeTail, p...)
		if len(s.modeTail) > keep {
			s.modeTail = s.modeTail[len(s.modeTail)-keep:]
		}
	}
}

func (s *screen) applyModes(p []byte) {
	for {
		i := bytes.LastIndex(p, bracketMode)
		if i < 0 {
			return
		}
		if j := i + len(bracketMode); j < len(p) {
			switch p[j] {
			case 'h':
				s.bracketed = true
				return
			case 'l':
				s.bracketed = false
				return
			}
		}
		p = p[:i]
	}
}

func (s *screen) size() (cols, rows int) { return s.vt.Size() }

func (s *screen) resize(cols, rows int) { s.vt.Resize(cols, rows) }

func (s *screen) cursor() Cursor {
	c := s.vt.Cursor()
	return Cursor{X: c.X, Y: c.Y, Visible: s.vt.CursorVisible()}
}

// lineEnd returns the length of row y once trailing blanks are trimmed,
// but never short of the cursor on its own row.
func (s *screen) lineEnd(y, cols int, cur vt10x.Cursor) int {
	end := cols
	for end > 0 {
		ch := s.vt.Cell(end-1, y).Char
		if ch != ' ' && ch != 0 {
			break
		}
		end--
	}
	if y == cur.Y && cur.X > end {
		end = cur.X
		if end > cols {
			end = cols
		}
	}
	return end
}

// render returns the screen as text, rows joined by newlines, trailing
// blanks trimmed except up to the cursor. The slice is reused by the next
// call.
func (s *screen) render() []byte {
	cols, rows := s.vt.Size()
	cur := s.vt.Cursor()
	b := s.buf[:0]
	for y := 0; y < rows; y++ {
		if y > 0 {
			b = append(b, '\n')
		}
		end := s.lineEnd(y, cols, cur)
		for x := 0; x < end; x++ {
			ch := s.vt.Cell(x, y).Char
			if ch == 0 {
				ch = ' '
			}
			b = utf8.AppendRune(b, ch)
		}
	}
	s.buf = b
	return b
}

// lines returns the rendered rows.
func (s *screen) lines() []string {
	return strings.Split(string(s.render()), "\n")
}

// text returns the rendered screen without trailing empty rows.
func (s *screen) text() string {
	return strings.TrimRight(string(s.render()), "\n")
}

func (s *screen) snapshot() ScreenData {
	cols, rows := s.vt.Size()
	return ScreenData{
		Text: s.text(), Cols: cols, Rows: rows, Cursor: s.cursor(),
		Title: s.vt.Title(), AltScreen: s.vt.Mode()&vt10x.ModeAltScreen != 0,
	}
}

// tail returns the last n non-empty rows, for crash reports.
func (s *screen) tail(n int) string {
	ls := s.lines()
	var out []string
	for i := len(ls) - 1; i >= 0 && len(out) < n; i-- {
		if l := strings.TrimSpace(ls[i]); l != "" {
			out = append(out, strings.TrimRight(ls[i], " "))
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return strings.Join(out, "\n")
}

// redraw returns the bytes that paint the current screen on a fresh
// terminal: modes, every row with its colours, then the cursor.
func (s *screen) redraw() []byte {
	cols, rows := s.vt.Size()
	cur := s.vt.Cursor()
	mode := s.vt.Mode()
	var b []byte
	if mode&vt10x.ModeAltScreen != 0 {
		b = append(b, "\x1b[?1049h"...)
	}
	b = append(b, "\x1b[0m\x1b[H\x1b[2J"...)
	for y := 0; y < rows; y++ {
		end := s.lineEnd(y, cols, vt10x.Cursor{X: -1, Y: -1})
		if end == 0 {
			continue
		}
		b = append(b, "\x1b["...)
		b = strconv.AppendInt(b, int64(y+1), 10)
		b = append(b, ";1H"...)
		var last vt10x.Glyph
		first := true
		for x := 0; x < end; x++ {
			g := s.vt.Cell(x, y)
			if first || g.FG != last.FG || g.BG != last.BG || g.Mode != last.Mode {
				b = appendSGR(b, g)
				last, first = g, false
			}
			ch := g.Char
			if ch == 0 {
				ch = ' '
			}
			b = utf8.AppendRune(b, ch)
		}
		b = append(b, "\x1b[0m"...)
	}
	b = append(b, "\x1b["...)
	b = strconv.AppendInt(b, int64(cur.Y+1), 10)
	b = append(b, ';')
	b = strconv.AppendInt(b, int64(cur.X+1), 10)
	b = append(b, 'H')
	if mode&vt10x.ModeAppCursor != 0 {
		b = append(b, "\x1b[?1h"...)
	}
	if s.bracketed {
		b = append(b, bracketOn...)
	}
	if s.vt.CursorVisible() {
		b = append(b, "\x1b[?25h"...)
	} else {
		b = append(b, "\x1b[?25l"...)
	}
	return b
}

// appendSGR appends the sequence that selects g's colours and attributes.
// The emulator stores reverse video with the colours already swapped.
func appendSGR(b []byte, g vt10x.Glyph) []byte {
	fg, bg := g.FG, g.BG
	b = append(b, "\x1b[0"...)
	if g.Mode&glyphReverse != 0 || fg == vt10x.DefaultBG || bg == vt10x.DefaultFG {
		fg, bg = bg, fg
		b = append(b, ";7"...)
	}
	if g.Mode&glyphBold != 0 {
		b = append(b, ";1"...)
	}
	if g.Mode&glyphItalic != 0 {
		b = append(b, ";3"...)
	}
	if g.Mode&glyphUnderline != 0 {
		b = append(b, ";4"...)
	}
	if g.Mode&glyphBlink != 0 {
		b = append(b, ";5"...)
	}
	b = appendColor(b, fg, 30, 90, 38, vt10x.DefaultFG)
	b = appendColor(b, bg, 40, 100, 48, vt10x.DefaultBG)
	return append(b, 'm')
}

func appendColor(b []byte, c vt10x.Color, base, bright, ext int, def vt10x.Color) []byte {
	switch {
	case c == def || c == vt10x.DefaultFG || c == vt10x.DefaultBG:
		return b
	case c < 8:
		b = append(b, ';')
		return strconv.AppendInt(b, int64(base)+int64(c), 10)
	case c < 16:
		b = append(b, ';')
		return strconv.AppendInt(b, int64(bright)+int64(c-8), 10)
	case c < 256:
		b = append(b, ';')
		b = strconv.AppendInt(b, int64(ext), 10)
		b = append(b, ";5;"...)
		return strconv.AppendInt(b, int64(c), 10)
	case c < 1<<24:
		b = append(b, ';')
		b = strconv.AppendInt(b, int64(ext), 10)
		b = append(b, ";2;"...)
		b = strconv.AppendInt(b, int64(c>>16&0xff), 10)
		b = append(b, ';')
		b = strconv.AppendInt(b, int64(c>>8&0xff), 10)
		b = append(b, ';')
		return strconv.AppendInt(b, int64(c&0xff), 10)
	}
	return b
}
