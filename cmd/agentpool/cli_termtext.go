package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// termText is text that came from an agent, a repository or a catalog,
// made safe to print on a terminal, as git and less show it: control
// characters are escaped so that none reaches the terminal raw (an ESC
// there could set the clipboard or the window's title, hide text, or
// move the cursor to overwrite what the CLI printed). C0 controls and
// DEL are shown in caret notation (ESC as ^[, CR as ^M, DEL as ^?), C1
// controls as \u0080..\u009f and bytes that are not UTF-8 as \xNN. The
// Unicode bidirectional embeddings, overrides and isolates (U+202A to
// U+202E, U+2066 to U+2069) are shown as \u202e and the like too: left
// raw, they would reorder what follows them on the line, so that a
// command or a file name reads other than it is.
// Newlines and tabs are kept: where the output must be one line, the
// caller folds them. The CLI's own colours are added around the result.
func termText(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20:
			b.WriteByte('^')
			b.WriteByte(byte(r) + '@')
		case r == 0x7f:
			b.WriteString("^?")
		case (r >= 0x80 && r < 0xa0) || bidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needsEscape reports whether termText would change s.
func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || (r >= 0x80 && r < 0xa0) || bidiControl(r) {
			return true
		}
		i += n
	}
	return false
}

// bidiControl reports whether r is a Unicode bidirectional embedding,
// override or isolate (LRE, RLE, PDF, LRO, RLO; LRI, RLI, FSI, PDI).
func bidiControl(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// termLine is termText on one line: newlines and tabs escaped too (^J,
// ^I), for a command shown before it runs, where a line break would let
// a part of it pass for something else.
func termLine(s string) string {
	return strings.NewReplacer("\n", "^J", "\t", "^I").Replace(termText(s))
}

// termArgs is args for a format of the CLI's own, with the strings and
// errors among them (an agent's or a daemon's words) passed through
// termText.
func termArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = termText(v)
		case error:
			out[i] = termText(v.Error())
		default:
			out[i] = a
		}
	}
	return out
}
