package acp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// wireLog records a backend's wire traffic.
type wireLog struct {
	mu      sync.Mutex
	in, out [][]byte
}

func (w *wireLog) record(inbound bool, line []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if inbound {
		w.in = append(w.in, bytes.Clone(line))
	} else {
		w.out = append(w.out, bytes.Clone(line))
	}
}

// byID returns the lines of one direction that are requests of method
// (method != "") or answers (method == ""), by id.
func (w *wireLog) byID(t *testing.T, inbound bool, method string) map[string][]byte {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.out
	if inbound {
		lines = w.in
	}
	got := map[string][]byte{}
	for _, l := range lines {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("wire line %s: %v", l, err)
		}
		if m.Method == method && len(m.ID) > 0 {
			got[string(m.ID)] = l
		}
	}
	return got
}

// sdkAnswer is the line the SDK itself writes when its handler answers
// request with result or rerr: the reference for the backend's own answers.
func sdkAnswer(t *testing.T, request []byte, result any, rerr *acpsdk.RequestError) []byte {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	conn := acpsdk.NewConnection(func(context.Context, string, json.RawMessage) (any, *acpsdk.RequestError) {
		if rerr != nil {
			return nil, rerr
		}
		return result, nil
	}, outW, inR)
	conn.SetLogger(quietLogger())
	go func() { _, _ = inW.Write(append(bytes.Clone(request), '\n')) }()
	line, err := bufio.NewReader(outR).ReadBytes('\n')
	if err != nil {
		t.Fatalf("SDK answer to %s: %v", request, err)
	}
	_ = inW.Close()
	<-conn.Done()
	_ = outR.Close()
	return bytes.TrimRight(line, "\n")
}

// The backend serves fs/read_text_file itself; its answers must be the
// SDK's, byte for byte, for integer and string request ids.
func TestReadAnswerIsTheSDKs(t *testing.T) {
	for _, strIDs := range []bool{false, true} {
		t.Run(map[bool]string{false: "integer ids", true: "string ids"}[strIDs], func(t *testing.T) {
			dir := t.TempDir()
			content := "alpha \"q\" <tag> & é\n\tbeta\u2028\n"
			writeFile(t, filepath.Join(dir, "a.txt"), content)
			w := &wireLog{}
			s := agenttest.Script{StringIDs: strIDs, Turns: []agenttest.Turn{{Steps: []agenttest.Step{
				{Read: &agenttest.FileOp{Path: "a.txt", Echo: true}},
				{Read: &agenttest.FileOp{Path: "missing.txt", Echo: true}},
			}}}}
			h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: newFS(t, dir), Wire: w.record})
			h.start(t, "")
			if _, err := h.prompt(t, "x"); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			reqs := w.byID(t, true, "fs/read_text_file")
			answers := w.byID(t, false, "")
			if len(reqs) != 2 {
				t.Fatalf("read requests on the wire = %d; want 2", len(reqs))
			}
			for id, req := range reqs {
				var result any
				var rerr *acpsdk.RequestError
				if bytes.Contains(req, []byte("missing.txt")) {
					details := `read "` + filepath.Join(dir, "missing.txt") + `": resource not found`
					rerr = &acpsdk.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"details": details}}
				} else {
					result = acpsdk.ReadTextFileResponse{Content: content}
				}
				if want := sdkAnswer(t, req, result, rerr); !bytes.Equal(answers[id], want) {
					t.Errorf("answer to %s = %s; want the SDK's %s", req, answers[id], want)
				}
			}
			if tx := h.turn.texts(backends.RoleAgent); !contains(tx, "read: "+content) || !contains(tx, "-32002") {
				t.Errorf("agent texts = %q; want the content, then -32002", tx)
			}
		})
	}
}

// Requests the backend does not serve itself go the SDK's way and get the
// SDK's answers.
func TestReadRequestsLeftToTheSDK(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n")
	abs := filepath.Join(dir, "a.txt")
	call := func(params string) agenttest.Step {
		return agenttest.Step{Request: &agenttest.RawCall{Method: "fs/read_text_file", Params: json.RawMessage(params)}}
	}
	for _, tc := range []struct {
		name   string
		withFS bool
		step   agenttest.Step
		want   string
	}{
		{"no path", true, call(`{"sessionId":"s"}`), `request error: -32602 Invalid params {"error":"path is required"}`},
		{"positional params", true, call(`["s", "` + abs + `"]`), "request error: -32602 Invalid params"},
		{"line not a number", true, call(`{"sessionId":"s","path":"` + abs + `","line":"2"}`), "request error: -32602 Invalid params"},
		{"no FS configured", false, call(`{"sessionId":"s","path":"` + abs + `"}`), "request error: -32601 Method not found"},
		{"served", true, call(`{"sessionId":"s","path":"` + abs + `"}`), `request result: {"content":"alpha\n"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := acp.Config{Spec: backends.Spec{Dir: dir}}
			if tc.withFS {
				cfg.FS = newFS(t, dir)
			}
			h := newBackend(t, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{tc.step}}}}, cfg)
			h.start(t, "")
			if _, err := h.prompt(t, "x"); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			if tx := h.turn.texts(backends.RoleAgent); !contains(tx, tc.want) {
				t.Errorf("answer = %q; want one containing %q", tx, tc.want)
			}
		})
	}
}

// A read with a null id is a notification to the SDK: it is not answered
// and the backend carries on.
func TestReadWithNullIDIsNotAnswered(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n")
	w := &wireLog{}
	line := `{"jsonrpc":"2.0","id":null,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + filepath.Join(dir, "a.txt") + `"}}`
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Garbage: line}, {Chunk: "still here"}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: newFS(t, dir), Wire: w.record})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	if tx := h.turn.texts(backends.RoleAgent); !contains(tx, "still here") {
		t.Errorf("agent texts = %q; want the chunk after the null-id read", tx)
	}
	if a, ok := w.byID(t, false, "")["null"]; ok {
		t.Errorf("null-id read answered: %s", a)
	}
}

// A read is served only after the updates the agent sent before it have
// been delivered, as on the SDK's path.
func TestReadFollowsEarlierUpdates(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n")
	var h *harness
	seen := -1
	fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir, Audit: func(acpfs.Op) { seen = len(h.turn.all()) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: 500}, {Read: &agenttest.FileOp{Path: "a.txt"}}}}}}
	h = newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: fs})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	if seen != 500 {
		t.Errorf("events delivered when the read was served = %d; want 500", seen)
	}
}

// An agent that exits while the backend serves its read: the answer meets
// a closed pipe, and the backend ends without hanging or leaking (goleak
// checks the goroutines at the end of the package).
func TestReadInFlightWhenAgentExits(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big.txt"), strings.Repeat("x\n", 1<<20))
	crash := 3
	read := `{"jsonrpc":"2.0","id":99,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + filepath.Join(dir, "big.txt") + `"}}`
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Garbage: read}, {Crash: &crash}}}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: newFS(t, dir)})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err == nil {
		t.Fatal("Prompt = nil error; want the crash")
	}
	<-h.b.Done()
	if err := h.b.Err(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Err() = %v; want the exit status 3", err)
	}
}

func newFS(t *testing.T, dir string) *acpfs.FS {
	t.Helper()
	fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir})
	if err != nil {
		t.Fatalf("NewFS(%q): %v", dir, err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	return fs
}
