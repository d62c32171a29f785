package agenttest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// loadTrace runs the scripted agent in this process, sends initialize and
// session/load, reads until the load's answer and then the next `after`
// lines, closes the agent's stdin and returns the chunk texts before and
// after the answer. It fails when Run does not return once stdin is closed.
func loadTrace(t *testing.T, s agenttest.Script, after int) (before, later []string) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := agenttest.Run(s, inR, outW, io.Discard)
		outW.Close()
		done <- err
	}()
	out := bufio.NewScanner(outR)
	send := func(id int, method string, params any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := inW.Write(append(b, '\n')); err != nil {
			t.Fatalf("write %s: %v", method, err)
		}
	}
	// next reads one line: the id of an answer, or the text of a chunk.
	next := func() (id int, text string) {
		if !out.Scan() {
			t.Fatalf("agent output ended: %v", out.Err())
		}
		var m struct {
			ID     *int `json:"id"`
			Params struct {
				Update struct {
					Content struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"update"`
			} `json:"params"`
		}
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("agent line %q: %v", out.Text(), err)
		}
		if m.ID != nil {
			return *m.ID, ""
		}
		return -1, m.Params.Update.Content.Text
	}
	send(1, "initialize", map[string]any{"protocolVersion": 1})
	if id, _ := next(); id != 1 {
		t.Fatalf("first line answers %d; want the initialize answer", id)
	}
	send(2, "session/load", map[string]any{"sessionId": "old", "cwd": t.TempDir(), "mcpServers": []any{}})
	for {
		id, text := next()
		if id == 2 {
			break
		}
		before = append(before, text)
	}
	for range after {
		_, text := next()
		later = append(later, text)
	}
	inW.Close()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run() error = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run() did not return after stdin closed")
	}
	return before, later
}

// ReplayAfterAnswer runs after the session/load answer, as gemini-cli
// replays; Replay runs before it.
func TestReplayAfterAnswer(t *testing.T) {
	s := agenttest.Script{
		LoadSession:       true,
		Replay:            []agenttest.Step{{Chunk: "one"}},
		ReplayAfterAnswer: []agenttest.Step{{Chunk: "two"}, {Chunk: "three"}},
		ReplayDelayMs:     5,
	}
	before, after := loadTrace(t, s, 2)
	if len(before) != 1 || before[0] != "one" || len(after) != 2 || after[0] != "two" || after[1] != "three" {
		t.Errorf("chunks before the answer %q, after %q; want [one], [two three]", before, after)
	}
}

// An endless replay stops when the client closes the agent's stdin.
func TestEndlessReplayStopsAtEOF(t *testing.T) {
	s := agenttest.Script{LoadSession: true, ReplayAfterAnswer: []agenttest.Step{{Chunks: 1 << 30, ChunksPerSecond: 1000}}}
	before, after := loadTrace(t, s, 20)
	if len(before) != 0 || len(after) != 20 {
		t.Errorf("%d chunks before the answer, %d after; want 0, 20", len(before), len(after))
	}
}
