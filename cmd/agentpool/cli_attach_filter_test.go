package main

import (
	"bytes"
	"testing"
)

// TestOSCFilter: attach drops a terminal agent's clipboard writes and
// title changes, ended by BEL or ST, also wrapped for tmux or screen to
// pass on, begun by the 8-bit controls too, and passes every other byte (colours,
// cursor moves, other OSCs such as hyperlinks) unchanged, however the
// stream is cut into writes.
func TestOSCFilter(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain \x1b[31mred\x1b[0m text\r\n", "plain \x1b[31mred\x1b[0m text\r\n"},
		{"a\x1b]52;c;Y3VybCBldmlsfHNo\x07b", "ab"},
		{"a\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\b", "ab"},
		{"a\x1b]0;pwned\x07b\x1b]1;icon\x1b\\c\x1b]2;title\x07d", "abcd"},
		{"a\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\b", "a\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\b"},
		{"a\x1b]521;x\x07b\x1b]10;?\x07c", "a\x1b]521;x\x07b\x1b]10;?\x07c"},
		{"a\x1b]2;cut\x18b", "ab"},
		{"a\x1b]0;t\x1b[1mbold", "a\x1b[1mbold"},
		{"\x1b\x1b]0;t\x07x\x1b", "\x1bx"},
		{"\x1b]", ""},
		{"a\u009d52;c;eA==\u009cb\u009d0;t\x07c", "abc"},
		{"ü\u009c\u009d8;;u\u009cé\xc2", "ü\u009c\u009d8;;u\u009cé"},
		{"a\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\b", "ab"},
		{"a\x1bPtmux;\x1b\x1b]0;t\x1b\x1b\\\x1b\\b", "ab"},
		{"a\x1bP\x1b]52;c;eA==\x07\x1b\\b", "ab"},
		{"a\x1bP$q\"p\x1b\\b\x1bPtmuch\x1b\\", "a\x1bP$q\"p\x1b\\b\x1bPtmuch\x1b\\"},
		// 8-bit controls standing alone (a terminal in an 8-bit mode obeys
		// them), and U+0090 as a DCS.
		{"a\x9d52;c;eA==\x07b\x9d0;t\x9cc\x9d2;t\x1b\\d", "abcd"},
		{"a\x90tmux;\x1b\x1b]52;c;eA==\x07\x1b\\b", "ab"},
		{"a\u0090tmux;\x1b\x1b]0;t\x07\u009cb\x90\x1b]52;c;eA==\x07\x9cc", "abc"},
		{"a\x9d8;;u\x9cb\x90$qm\x9cc\u0090$q\u009c", "a\x9d8;;u\x9cb\x90$qm\x9cc\u0090$q\u009c"},
		// The same bytes inside UTF-8 characters are no controls: ✝ Ý ✐ ✜
		// pass, and a dropped title with ✜ in it is dropped whole.
		{"✝Ý✐✜ \x1b]0;a✜b\x07ok", "✝Ý✐✜ ok"},
		{"é\x9d0;t\x07\xe2\x9c\x9dx", "é\xe2\x9c\x9dx"},
	} {
		// What may begin a sequence at the end is held until more comes.
		in, want := []byte(tc.in), tc.want
		check := func(how string, parts ...[]byte) {
			t.Helper()
			var out bytes.Buffer
			f := newOSCFilter(&out)
			for _, p := range parts {
				if n, err := f.Write(p); n != len(p) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := out.String(); got != want {
				t.Errorf("%s: filter(%q) = %q; want %q", how, tc.in, got, want)
			}
		}
		check("one write", in)
		for i := 1; i < len(in); i++ {
			check("split", in[:i], in[i:])
		}
		bytewise := make([][]byte, len(in))
		for i := range in {
			bytewise[i] = in[i : i+1]
		}
		check("byte by byte", bytewise...)
	}
}
