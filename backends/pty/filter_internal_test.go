package pty

import (
	"strings"
	"testing"
)

// TestScreenIgnoresMisreadSequences feeds sequences that vt10x would
// misread (private markers, intermediates) and checks that the text lands
// where a real terminal puts it.
func TestScreenIgnoresMisreadSequences(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string
	}{
		{"kitty keyboard query is not a cursor restore", []string{"\x1b[3;5Habc\x1b[?uX"}, "\n\n    abcX"},
		{"kitty push and pop", []string{"\x1b[2;3Hab\x1b[>1u\x1b[<uc"}, "\n  abc"},
		{"kitty set flags", []string{"ab\x1b[=1;1uc"}, "abc"},
		{"XTSAVE is not a cursor save", []string{"\x1b[2;1H\x1b[s\x1b[1;1H\x1b[?1049sab\x1b[uc"}, "ab\nc"},
		{"modifyOtherKeys keeps the colours", []string{"a\x1b[>4;2mb"}, "ab"},
		{"cursor style", []string{"a\x1b[2 qb"}, "ab"},
		{"mode report request", []string{"a\x1b[?2026$pb"}, "ab"},
		{"split across writes", []string{"\x1b[3;5Habc\x1b", "[", "?", "u", "X"}, "\n\n    abcX"},
		{"ESC at the end of a write", []string{"ab\x1b", "[2Dc"}, "cb"},
		{"plain sequences still work", []string{"xy\x1b[1;1Hz\x1b[s\x1b[2;2Hq\x1b[uw"}, "zw\n q"},
		{"private modes still work", []string{"\x1b[?25l\x1b[?1049habc\x1b[?1049ldef"}, "def"},
		{"control character inside a sequence", []string{"ab\x1b[\r2Cc"}, "abc"},
		{"cancelled sequence", []string{"ab\x1b[?\x18c"}, "abc"},
		{"escape inside a sequence starts another", []string{"ab\x1b[?\x1b[1Dc"}, "ac"},
		{"OSC title", []string{"\x1b]0;title\x07ab\x1b]2;t2\x1b\\c"}, "abc"},
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

// TestCSIFilterPassesOrdinaryOutput checks that output without the
// sequences the filter drops comes out byte for byte, however it is split.
func TestCSIFilterPassesOrdinaryOutput(t *testing.T) {
	in := "\x1b[1;32mgreen\x1b[0m \x1b[?2004h\x1b[2J\x1b[H\x1b7\x1b[24;1H\x1b[7m status \x1b[0m\x1b8" +
		"\x1b]0;title\x07\x1b(B\x1bM€ 😀\r\n"
	for size := 1; size <= len(in); size++ {
		var f csiFilter
		var sb strings.Builder
		for i := 0; i < len(in); i += size {
			sb.Write(f.apply([]byte(in[i:min(i+size, len(in))])))
		}
		if got := sb.String(); got != in {
			t.Fatalf("apply in pieces of %d = %q; want the input %q", size, got, in)
		}
	}
}
