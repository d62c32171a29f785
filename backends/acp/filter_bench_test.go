package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// BenchmarkFilterLine measures the line filter alone: one line read from
// the agent's stdout, decoded and turned into a queued Event (an update) or
// passed on to the SDK (anything else), with no process, pipe wake-up or
// scheduling in the figure. The delivery side is drained every 128 lines.
func BenchmarkFilterLine(b *testing.B) {
	const sid = "fake-1234-1763785000000000000"
	update := func(u string) string {
		return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"` + sid + `","update":` + u + `}}`
	}
	for _, bc := range []struct{ name, line string }{
		{"agent_message_chunk", update(`{"content":{"text":"c","type":"text"},"sessionUpdate":"agent_message_chunk"}`)},
		{"agent_message_chunk-1KiB", update(`{"content":{"text":"` + strings.Repeat("x", 1024) + `","type":"text"},"sessionUpdate":"agent_message_chunk"}`)},
		{"tool_call_update", update(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"done"}}]}`)},
		{"fs_read_request", `{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"` + sid + `","path":"/w/file4k.txt"}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			be, err := New(Config{
				Spec:   backends.Spec{Provider: "bench", Kind: backends.KindACP, Path: "/bin/true", Dir: b.TempDir()},
				Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				b.Fatal(err)
			}
			be.sessionID = sid
			pr, pw := io.Pipe()
			sdk := make(chan int64)
			go func() { n, _ := io.Copy(io.Discard, pr); sdk <- n }()
			// A link without a connection: what the SDK would be given is
			// counted, nothing answers.
			be.links.cur = &link{pw: pw}
			line := []byte(bc.line)
			buf := make([]byte, 0, len(line)+1)
			delivered := 0
			b.SetBytes(int64(len(line) + 1))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// handleLine may keep parts of its input: give it a fresh copy
				// as the filter's reader would.
				buf = append(buf[:0], line...)
				if err := be.handleLine(buf); err != nil {
					b.Fatalf("handleLine(%s) = %v", bc.name, err)
				}
				// Taken well before maxQueuedEvents are queued: the
				// filter would wait for room, and the benchmark with it.
				if i%(maxQueuedEvents/2) == maxQueuedEvents/2-1 || i == b.N-1 {
					if n := be.queue.pushedCount() - be.queue.delivered; n > 0 {
						evs, _ := be.queue.take()
						for _, it := range evs {
							be.queue.free(cap(it.ev.Data)) // as the delivery does
						}
						be.queue.markDelivered(len(evs))
						delivered += len(evs)
					}
				}
			}
			b.StopTimer()
			_ = pw.Close()
			passed := <-sdk
			if strings.Contains(bc.line, `"session/update"`) {
				if delivered != b.N || passed != 0 {
					b.Fatalf("%d events queued, %d bytes passed to the SDK; want %d events, 0 bytes", delivered, passed, b.N)
				}
			} else if delivered != 0 || passed != int64(b.N*(len(line)+1)) {
				b.Fatalf("%d events queued, %d bytes passed to the SDK; want 0 events, %d bytes", delivered, passed, b.N*(len(line)+1))
			}
		})
	}
}

// The filter must turn every kind of line into the same events whichever
// way it decodes it (in one pass, or the strict way for uncommon shapes):
// this pins the mapping, the refusals and the drops.
func TestFilterLineEvents(t *testing.T) {
	const sid = "s1"
	update := func(u string) string { return `{"sessionId":"` + sid + `","update":` + u + `}` }
	for _, tc := range []struct {
		name, params string
		typ          backends.EventType // "" for no event
		data         string
		wantErr      bool
	}{
		{"text chunk", update(`{"content":{"text":"héllo \"q\"\n","type":"text"},"sessionUpdate":"agent_message_chunk"}`), backends.EventMessageChunk, `{"role":"agent","text":"héllo \"q\"\n"}`, false},
		{"thought", update(`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}`), backends.EventMessageChunk, `{"role":"thought","text":"hm"}`, false},
		{"user echo", update(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}`), backends.EventMessageChunk, `{"role":"user_echo","text":"hi"}`, false},
		{"image chunk", update(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA==","mimeType":"image/png"}}`), backends.EventMessageChunk, `{"role":"agent","content":{"type":"image","data":"AA==","mimeType":"image/png"}}`, false},
		{"tool call", update(`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read"}`), backends.EventToolCall, `{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Read"}`, false},
		{"tool update with content list", update(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","content":[{"type":"content","content":{"type":"text","text":"ok"}}]}`), backends.EventToolUpdate, `{"sessionUpdate":"tool_call_update","toolCallId":"t1","content":[{"type":"content","content":{"type":"text","text":"ok"}}]}`, false},
		{"plan", update(`{"sessionUpdate":"plan","entries":[]}`), backends.EventPlan, `{"sessionUpdate":"plan","entries":[]}`, false},
		{"future kind", update(`{"sessionUpdate":"hologram","x":1}`), EventUnknownUpdate, `{"sessionUpdate":"hologram","x":1}`, false},
		{"null update", update(`null`), EventUnknownUpdate, `null`, false},
		{"other session", `{"sessionId":"s2","update":{"sessionUpdate":"plan","entries":[]}}`, "", "", false},
		{"no update", `{"sessionId":"s1"}`, "", "", true},
		{"session id not a string", `{"sessionId":5,"update":{"sessionUpdate":"plan"}}`, "", "", true},
		{"tool call id not a string", update(`{"sessionUpdate":"tool_call","toolCallId":5}`), "", "", true},
		{"positional params", `["s1",{"sessionUpdate":"plan"}]`, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be, err := New(Config{
				Spec:   backends.Spec{Provider: "p", Kind: backends.KindACP, Path: "/bin/true", Dir: t.TempDir()},
				Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				t.Fatal(err)
			}
			be.sessionID = sid
			line := []byte(`{"jsonrpc":"2.0","method":"session/update","params":` + tc.params + `}`)
			before := time.Now()
			err = be.handleLine(line)
			if tc.wantErr {
				if !errors.Is(err, ErrProtocol) {
					t.Errorf("handleLine(%s) = %v; want ErrProtocol", line, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("handleLine(%s) = %v; want nil", line, err)
			}
			if tc.typ == "" {
				if n := be.queue.pushedCount(); n != 0 {
					t.Errorf("handleLine(%s) queued %d events; want none", line, n)
				}
				return
			}
			evs, _ := be.queue.take()
			if len(evs) != 1 {
				t.Fatalf("handleLine(%s) queued %d events; want 1", line, len(evs))
			}
			ev := evs[0].ev
			got := fmt.Sprintf("%s %s %s", ev.Type, ev.Agent, compact(t, ev.Data))
			want := fmt.Sprintf("%s %s %s", tc.typ, "p", compact(t, []byte(tc.data)))
			if got != want || ev.Time.Before(before) {
				t.Errorf("handleLine(%s) event = %s at %v; want %s after %v", line, got, ev.Time, want, before)
			}
		})
	}
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return buf.String()
}
