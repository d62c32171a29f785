package mockmodel

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMocksAnswerReply: each mock answers its completion request with
// Reply (streamed in pieces), refuses other paths, listens where it is
// told and records what it served.
func TestMocksAnswerReply(t *testing.T) {
	tests := []struct {
		api        API
		path, body string
	}{
		{Anthropic, "/v1/messages", `{"stream": true, "model": "m"}`},
		{Anthropic, "/v1/messages", `{"model": "m"}`},
		{Responses, "/v1/responses", `{"model": "m"}`},
		{Gemini, "/v1beta/models/m:streamGenerateContent", `{}`},
		{ChatCompletions, "/v1/chat/completions", `{"stream": true, "model": "m"}`},
	}
	for _, tt := range tests {
		s := New(t, tt.api, Config{Addr: "127.0.0.1:0"})
		resp, err := http.Post(s.URL+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := strings.NewReplacer(`"`, "", "\n", "").Replace(string(raw))
		for _, p := range pieces(Reply) {
			if !strings.Contains(text, p) {
				t.Errorf("%s %s: answer lacks %q:\n%s", tt.api, tt.path, p, raw)
			}
		}
		resp, err = http.Get(s.URL + "/elsewhere")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s /elsewhere: status %d, want 404", tt.api, resp.StatusCode)
		}
		if got := s.Requests(); len(got) != 2 || got[0].Path != tt.path || got[0].Host != s.Listener.Addr().String() {
			t.Errorf("%s: requests %+v", tt.api, got)
		}
	}
}
