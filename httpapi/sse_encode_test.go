package httpapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// encodeEvent gives what json.Marshal gives, on one line, for Data as the
// daemon makes it and for Data with line breaks in it.
func TestEncodeEventMatchesMarshal(t *testing.T) {
	at := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	datas := []string{
		``,
		`{"role":"agent","text":"a<b>&c \u2028 é"}`,
		`{"role":"agent","text":"` + strings.Repeat("y", 1<<20) + `"}`,
		"{\n  \"a\": [1,\r\n 2]\n}",
		`{ "spaced" : true }`,
		`[1,2,3]`,
	}
	for _, d := range datas {
		ev := backends.Event{Seq: 7, Session: "s-1", Agent: "claude", Turn: 2, Time: at, Type: backends.EventMessageChunk, Data: json.RawMessage(d)}
		got, err := encodeEvent(ev)
		if err != nil {
			t.Fatalf("encodeEvent(%.40q) = %v", d, err)
		}
		if bytes.ContainsAny(got, "\r\n") {
			t.Errorf("encodeEvent(%.40q) = %.80q: a line break in an SSE data line", d, got)
		}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("encodeEvent(%.40q) = %.80q: %v", d, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("encodeEvent(%.40q) decodes as %.200v; want %.200v", d, g, w)
		}
	}
}

func BenchmarkEncodeEventBig(b *testing.B) {
	ev := backends.Event{Seq: 7, Session: "s-1", Time: time.Now(), Type: backends.EventMessageChunk,
		Data: json.RawMessage(`{"role":"agent","text":"` + strings.Repeat("y", 1<<20) + `"}`)}
	b.Run("encodeEvent", func(b *testing.B) {
		for range b.N {
			if _, err := encodeEvent(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for range b.N {
			if _, err := json.Marshal(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
