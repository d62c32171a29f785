package acpfs

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTailBuffer(t *testing.T) {
	text := strings.Repeat("ascii é € 🎉 ", 200)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int{0, 1, 2, 3, 4, 5, 7, 64, 1000, 10000} {
		for _, maxChunk := range []int{1, 3, 50, 5000} {
			b := &tailBuffer{limit: limit}
			var written strings.Builder
			for written.Len() < len(text) {
				n := min(1+rng.IntN(maxChunk), len(text)-written.Len())
				chunk := text[written.Len() : written.Len()+n]
				b.Write([]byte(chunk))
				written.WriteString(chunk)
				got, truncated := b.String()
				want, wantTrunc := tailOf(written.String(), limit)
				if got != want || truncated != wantTrunc {
					t.Fatalf("limit %d, after %d bytes: String() = %q, %v; want %q, %v", limit, written.Len(), got, truncated, want, wantTrunc)
				}
				if !utf8.ValidString(got) {
					t.Fatalf("limit %d: String() = %q is not valid UTF-8", limit, got)
				}
			}
			if b.Total() != int64(len(text)) {
				t.Errorf("Total() = %d; want %d", b.Total(), len(text))
			}
			if limit > 0 && cap(b.buf) > 4*limit+2*maxChunk+16 {
				t.Errorf("limit %d: buffer capacity %d; want it bounded", limit, cap(b.buf))
			}
		}
	}
}

// tailOf is the reference: the last limit bytes of s, starting at a rune
// boundary and ending before an incomplete rune.
func tailOf(s string, limit int) (string, bool) {
	tail, truncated := s, false
	if len(s) > limit {
		tail, truncated = s[len(s)-limit:], true
		for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
			tail = tail[1:]
		}
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[:len(tail)-1]
	}
	return tail, truncated
}

func TestTailBufferBinary(t *testing.T) {
	b := &tailBuffer{limit: 4}
	b.Write([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80})
	if got, truncated := b.String(); got != "\x80" || !truncated {
		t.Errorf("String() of continuation bytes = %q, %v; want one byte kept, true", got, truncated)
	}
	b = &tailBuffer{limit: 10}
	b.Write([]byte("ab\xe2\x82"))
	if got, truncated := b.String(); got != "ab" || truncated {
		t.Errorf("String() with a partial euro sign = %q, %v; want \"ab\", false", got, truncated)
	}
	b.Write([]byte("\xac"))
	if got, _ := b.String(); got != "ab€" {
		t.Errorf("String() once the euro sign is complete = %q; want \"ab€\"", got)
	}
}
