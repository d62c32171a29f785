package acp

import (
	"encoding/json"
	"testing"

	acpsdk "github.com/coder/acp-go-sdk"
)

// readAnswer writes what encoding/json writes for the same answer.
func TestReadAnswerMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "<tag> & </tag>", "\b\f\n\r\t\x00\x01\x1f\x7f",
		"é€🎉", "line\u2028sep\u2029", "bad \xff utf-8", "\xe2\x82"} {
		for _, id := range []string{`0`, `"uuid-1"`, ` 7 `} {
			want, err := json.Marshal(struct {
				JSONRPC string                       `json:"jsonrpc"`
				ID      json.RawMessage              `json:"id"`
				Result  *acpsdk.ReadTextFileResponse `json:"result,omitempty"`
			}{"2.0", json.RawMessage(id), &acpsdk.ReadTextFileResponse{Content: s}})
			if err != nil {
				t.Fatal(err)
			}
			got := readAnswer(json.RawMessage(id), s)
			if string(got) != string(want)+"\n" {
				t.Errorf("readAnswer(%s, %q) = %s; want %s", id, s, got, want)
			}
			if cap(got) != len(got) {
				t.Errorf("readAnswer(%q) capacity %d for %d bytes; want exact", s, cap(got), len(got))
			}
		}
	}
}
