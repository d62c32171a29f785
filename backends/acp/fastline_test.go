package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// oracleInbound is handleLine's decoding before the fast path.
func oracleInbound(line []byte) (inbound, error) {
	var m inbound
	err := json.Unmarshal(line, &m)
	return m, err
}

// checkInbound fails when decodeInbound decodes line other than
// encoding/json does; it reports whether the fast path took it.
func checkInbound(t *testing.T, line []byte) bool {
	t.Helper()
	var m inbound
	span, ok := decodeInbound(line, &m)
	if !ok {
		return false
	}
	want, err := oracleInbound(line)
	if err != nil {
		t.Fatalf("decodeInbound took %q, which encoding/json refuses: %v", line, err)
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decodeInbound(%q)\n = %+v\nwant %+v", line, m, want)
	}
	if want.Params.Update != nil {
		if got := rawUpdate(line); !bytes.Equal(span, got) {
			t.Fatalf("decodeInbound(%q): update %q; want %q", line, span, got)
		}
	}
	return true
}

var trickyLines = []string{
	`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \"x\" \u00e9\n"}}}}`,
	`{"method":"session/update","params":{"sessionId":"s1","update":null}}`,
	`{"method":"session/update","params":null}`,
	`{"method":"session/update","params":[1,2]}`,
	`{"method":"session/update","params":{"sessionId":5,"update":{}}}`,
	`{"method":"session/update","params":{"sessionId":"s","update":"x"}}`,
	`{"Method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}}}`,
	`{"method":"session/update","params":{"ſessionId":"s","update":{"sessionUpdate":"plan"}}}`,
	`{"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan"},"update":{"kind":"read"}}}`,
	`{"method":"session/update","method":"other"}`,
	`{"method":"session/\u0075pdate","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}}}`,
	`{"me\u0074hod":"session/update"}`,
	`{"id":null,"result":{"stopReason":"end_turn"}}`,
	`{"id":7,"result":{"stopReason":"end_turn"},"error":null}`,
	`{"id":"a","method":"fs/read_text_file","params":{"sessionId":"s","path":"/x"}}`,
	`{"method":null,"id":1}`,
	`{"method":"session/update","params":{"sessionId":null,"update":{"sessionUpdate":null,"content":null,"messageId":"m\u00e9"}}}`,
	`{"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"t","kind":"edit","content":[{"type":"diff"}],"availableCommands":[],"configOptions":{}}}}`,
	`{"method":"x","params":{"sessionId":"s\u0000","update":{"sessionUpdate":"agent_thought_chunk"}}}`,
	`{"method":"\xff","params":{}}`,
	`[1]`, `"x"`, `{"method":"session/update"`, `{}`, ` { "method" : "session/update" , "params" : { "sessionId" : "s" , "update" : { "sessionUpdate" : "plan" } } } `,
}

// decodeInbound agrees with encoding/json on tricky lines, on every line
// of the real agents' transcripts, and takes every update of those.
func TestDecodeInboundAgreesWithEncodingJSON(t *testing.T) {
	for _, l := range trickyLines {
		checkInbound(t, []byte(l))
	}
	paths, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.jsonl"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("transcripts: %v", err)
	}
	updates, fast := 0, 0
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var rec struct {
				From string          `json:"from"`
				Msg  json.RawMessage `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.From != "agent" {
				continue
			}
			took := checkInbound(t, rec.Msg)
			if bytes.Contains(rec.Msg, []byte(`"session/update"`)) {
				updates++
				if took {
					fast++
				}
			}
		}
		f.Close()
	}
	t.Logf("the fast path took %d of %d updates", fast, updates)
	if updates == 0 || fast != updates {
		t.Errorf("the fast path took %d of the transcripts' %d updates; want all", fast, updates)
	}
}

func FuzzDecodeInbound(f *testing.F) {
	for _, l := range trickyLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkInbound(t, line) })
}

// oracleChunkData is chunkData before the fast path.
func oracleChunkData(role, messageID string, content json.RawMessage) json.RawMessage {
	var tc textContent
	if json.Unmarshal(content, &tc) != nil {
		tc = textContent{}
	}
	return chunkDataWith(role, messageID, content, tc)
}

// chunkData gives what it gave before the fast path, for text blocks and
// the other shapes a content may have.
func TestChunkDataAgrees(t *testing.T) {
	for _, c := range []string{
		`{"type":"text","text":"hello"}`, `{"type":"text","text":""}`, `{"type":"text","text":null}`, `{"type":"text"}`,
		`{"type":"image","data":"x"}`, `{"Type":"text","text":"x"}`, `{"type":"text","text":"a","text":"b"}`, `{"type":"text","text":5}`,
		`null`, `[]`, `"text"`, `{"type":5,"text":"x"}`, `{"type":"te\u0078t","text":"x\ny"}`, `{"text":"x","type":"text"}`,
	} {
		for _, id := range []string{"", "m1"} {
			if got, want := chunkData("assistant", id, json.RawMessage(c)), oracleChunkData("assistant", id, json.RawMessage(c)); !bytes.Equal(got, want) {
				t.Errorf("chunkData(%s, %q) = %s; want %s", c, id, got, want)
			}
		}
	}
	if strings.Contains(string(chunkData("assistant", "", json.RawMessage(`{"type":"text","text":"x"}`))), `"content"`) {
		t.Error("a text block kept as content")
	}
}

// The fast path's keys are the structs' JSON names: a field added to one
// of them and not to its keys fails here, not silently in production.
func TestFastKeysMatchTheStructs(t *testing.T) {
	names := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
		return out
	}
	for _, c := range []struct {
		what string
		v    any
		keys []string
	}{
		{"inbound", inbound{}, inboundKeys},
		{"inbound params", inbound{}.Params, paramsKeys},
		{"update", update{}, updateKeys},
		{"textContent", textContent{}, textKeys},
	} {
		if got := names(c.v); !reflect.DeepEqual(got, c.keys) {
			t.Errorf("%s's JSON names %q; the fast path knows %q", c.what, got, c.keys)
		}
	}
}
