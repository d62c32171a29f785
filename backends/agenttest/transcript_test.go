package agenttest_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// tline builds a transcript line.
func tline(from, msg string) agenttest.TranscriptLine {
	return agenttest.TranscriptLine{From: from, Msg: json.RawMessage(msg)}
}

// testTranscript: initialize, an update naming the working directory, a
// prompt during which the agent asks the client something, its answer.
var testTranscript = agenttest.Transcript{
	Header: agenttest.TranscriptHeader{Agent: "fake", Version: "1", Command: []string{"fake"}},
	Lines: []agenttest.TranscriptLine{
		tline(agenttest.FromClient, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`),
		tline(agenttest.FromAgent, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}`),
		tline(agenttest.FromAgent, `{"jsonrpc":"2.0","method":"session/update","params":{"cwd":"$CWD/a.txt"}}`),
		tline(agenttest.FromClient, `{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}`),
		tline(agenttest.FromAgent, `{"jsonrpc":"2.0","id":0,"method":"fs/read_text_file","params":{}}`),
		tline(agenttest.FromClient, `{"jsonrpc":"2.0","id":0,"result":{"content":""}}`),
		tline(agenttest.FromAgent, `{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}`),
	},
}

// TestReplayTranscript drives ReplayTranscript as a client whose ids differ
// from the recorded ones and which sends a request the transcript does not
// have: the answers carry the live ids, the stray request gets
// method-not-found, $CWD becomes the live directory, and the agent's own
// request waits for its answer.
func TestReplayTranscript(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := agenttest.ReplayTranscript(testTranscript, "/work/tree", inR, outW)
		outW.Close()
		done <- err
	}()
	out := bufio.NewScanner(outR)
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(want string) {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("output ended, want %s", want)
		}
		var g, w any
		_ = json.Unmarshal(out.Bytes(), &g)
		_ = json.Unmarshal([]byte(want), &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("agent wrote %s, want %s", out.Bytes(), want)
		}
	}
	send(`{"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}`)
	expect(`{"jsonrpc":"2.0","id":"a","result":{"protocolVersion":1}}`)
	expect(`{"jsonrpc":"2.0","method":"session/update","params":{"cwd":"/work/tree/a.txt"}}`)
	send(`{"jsonrpc":"2.0","method":"session/cancel","params":{}}`)
	send(`{"jsonrpc":"2.0","id":7,"method":"session/set_mode","params":{}}`)
	expect(`{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found","data":{"method":"session/set_mode"}}}`)
	send(`{"jsonrpc":"2.0","id":42,"method":"session/prompt","params":{}}`)
	expect(`{"jsonrpc":"2.0","id":0,"method":"fs/read_text_file","params":{}}`)
	send(`{"jsonrpc":"2.0","id":0,"result":{"content":"x"}}`)
	expect(`{"jsonrpc":"2.0","id":42,"result":{"stopReason":"end_turn"}}`)
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReplayTranscript: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReplayTranscript did not return after its input closed")
	}
}

// A client that goes away early leaves the transcript unfinished.
func TestReplayTranscriptUnfinished(t *testing.T) {
	inR, inW := io.Pipe()
	go func() {
		_, _ = io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`+"\n")
		inW.Close()
	}()
	err := agenttest.ReplayTranscript(testTranscript, "/", inR, io.Discard)
	if !errors.Is(err, agenttest.ErrTranscriptUnfinished) {
		t.Fatalf("ReplayTranscript = %v, want ErrTranscriptUnfinished", err)
	}
}

// A transcript survives Write and ReadTranscript.
func TestTranscriptRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := testTranscript.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := agenttest.ReadTranscript(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Header, testTranscript.Header) || len(got.Lines) != len(testTranscript.Lines) {
		t.Fatalf("read back %+v", got)
	}
	for i, l := range got.Lines {
		var g, w any
		_ = json.Unmarshal(l.Msg, &g)
		_ = json.Unmarshal(testTranscript.Lines[i].Msg, &w)
		if l.From != testTranscript.Lines[i].From || !reflect.DeepEqual(g, w) {
			t.Errorf("line %d: %+v", i, l)
		}
	}
}
