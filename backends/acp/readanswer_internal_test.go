package acp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	acpsdk "github.com/coder/acp-go-sdk"
)

// piecesOf lends s in pieces of about n bytes ending on character
// boundaries, as acpfs.Content.Each does.
func piecesOf(s string, n int) func(func([]byte) error) error {
	return func(fn func([]byte) error) error {
		for len(s) > 0 {
			k := min(n, len(s))
			for j := 1; j < utf8.UTFMax && k < len(s) && !utf8.RuneStart(s[k]); j++ {
				k++
			}
			if err := fn([]byte(s[:k])); err != nil {
				return err
			}
			s = s[k:]
		}
		return nil
	}
}

// writeReadAnswer writes what encoding/json writes for the same answer,
// whatever the pieces, in writes of at most answerPiece bytes.
func TestReadAnswerMatchesEncodingJSON(t *testing.T) {
	big := strings.Repeat("<é\n€🎉\u2028\x01", 3*answerPiece/13)
	for _, s := range []string{"", "plain", "a\"b\\c", "<tag> & </tag>", "\b\f\n\r\t\x00\x01\x1f\x7f",
		"é€🎉", "line\u2028sep\u2029", "bad \xff utf-8", "\xe2\x82", big} {
		for _, id := range []string{`0`, `"uuid-1"`, ` 7 `} {
			want, err := json.Marshal(struct {
				JSONRPC string                       `json:"jsonrpc"`
				ID      json.RawMessage              `json:"id"`
				Result  *acpsdk.ReadTextFileResponse `json:"result,omitempty"`
			}{"2.0", json.RawMessage(id), &acpsdk.ReadTextFileResponse{Content: s}})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 7, encodeWindow + 1, 1 << 20} {
				var got []byte
				err := writeReadAnswer(func(p []byte) error {
					if len(p) > answerPiece {
						t.Errorf("a write of %d bytes; want at most %d", len(p), answerPiece)
					}
					got = append(got, p...)
					return nil
				}, json.RawMessage(id), piecesOf(s, n))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want)+"\n" {
					t.Errorf("writeReadAnswer(%s, %.40q in pieces of %d) = %.200s; want %.200s", id, s, n, got, want)
				}
			}
		}
	}
}

// A write that fails ends the answer; a file that fails after the answer
// began still ends the line.
func TestReadAnswerErrors(t *testing.T) {
	boom := errors.New("boom")
	big := strings.Repeat("x", 3*answerPiece)
	writes := 0
	err := writeReadAnswer(func([]byte) error { writes++; return boom }, json.RawMessage(`1`), piecesOf(big, 1000))
	if !errors.Is(err, boom) || writes != 1 {
		t.Errorf("failing writes: %v after %d writes; want boom after 1", err, writes)
	}
	var got []byte
	err = writeReadAnswer(func(p []byte) error { got = append(got, p...); return nil }, json.RawMessage(`1`),
		func(fn func([]byte) error) error { _ = fn([]byte("abc")); return boom })
	if !errors.Is(err, boom) || string(got) != `{"jsonrpc":"2.0","id":1,"result":{"content":"abc"}}`+"\n" {
		t.Errorf("failing file: %v, %s; want boom and a whole line", err, got)
	}
}
