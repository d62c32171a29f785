package acp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends"
)

// chunkData splices a text block's JSON string into the event as it is;
// what a reader decodes is what decoding and encoding the text gave.
func TestChunkDataDecodesAsTheDecodedText(t *testing.T) {
	big := strings.Repeat("x<&>\u2028é\"\\\n", 1000)
	bigJSON, _ := json.Marshal(big)
	cases := []struct {
		name, content, messageID string
		want                     backends.ChunkData
	}{
		{"text", `{"type":"text","text":"hello"}`, "", backends.ChunkData{Role: "agent", Text: "hello"}},
		{"escapes", `{"type":"text","text":"a\u003cb\n\"c\" \ud83d\ude00 \\"}`, "m1",
			backends.ChunkData{Role: "agent", Text: "a<b\n\"c\" \U0001F600 \\", MessageID: "m1"}},
		{"big", `{"type":"text","text":` + string(bigJSON) + `}`, "", backends.ChunkData{Role: "agent", Text: big}},
		{"spaces", `{ "text" : "x" , "type" : "text" }`, "", backends.ChunkData{Role: "agent", Text: "x"}},
		{"empty", `{"type":"text","text":""}`, "m2", backends.ChunkData{Role: "agent", MessageID: "m2"}},
		{"null", `{"type":"text","text":null}`, "", backends.ChunkData{Role: "agent"}},
		{"missing", `{"type":"text"}`, "", backends.ChunkData{Role: "agent"}},
		{"image", `{"type":"image","data":"AAAA","mimeType":"image/png"}`, "",
			backends.ChunkData{Role: "agent", Content: json.RawMessage(`{"type":"image","data":"AAAA","mimeType":"image/png"}`)}},
		{"number text", `{"type":"text","text":12}`, "",
			backends.ChunkData{Role: "agent", Content: json.RawMessage(`{"type":"text","text":12}`)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := chunkData("agent", c.messageID, json.RawMessage(c.content))
			if !json.Valid(raw) {
				t.Fatalf("chunkData = %s: not JSON", raw)
			}
			var got backends.ChunkData
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Content) > 0 {
				got.Content = canonical(t, got.Content)
				c.want.Content = canonical(t, c.want.Content)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("chunkData decodes as %+v; want %+v", got, c.want)
			}
		})
	}
}

func canonical(t *testing.T, raw json.RawMessage) json.RawMessage {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return b
}
