package agenttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentpool/agentpool/backends"
)

// EnvTranscript names the transcript file HelperReplay replays.
const EnvTranscript = "AGENTPOOL_TEST_TRANSCRIPT"

// Who sent a transcript line, in TranscriptLine.From.
const (
	FromAgent  = "agent"
	FromClient = "client"
)

// Placeholders that stand for machine-specific paths in a transcript.
const (
	// PlaceholderCwd is the session's working directory (the worktree);
	// HelperReplay puts its own working directory in its place.
	PlaceholderCwd = "$CWD"
	// PlaceholderHome is the agent's home directory.
	PlaceholderHome = "$HOME"
)

// TranscriptHeader is the first line of a transcript: what was recorded.
type TranscriptHeader struct {
	// Agent is the provider name (claude, codex, gemini).
	Agent string `json:"agent"`
	// Package and Version are the agent's npm package and its version.
	Package string `json:"package,omitempty"`
	Version string `json:"version"`
	// Command is the launch line, the program by its base name.
	Command []string `json:"command"`
	// Model says what answered the agent's model requests.
	Model string `json:"model,omitempty"`
}

// TranscriptLine is one JSON-RPC message on the wire between a client and
// an agent.
type TranscriptLine struct {
	// MS is the time since the previous line, in milliseconds.
	MS int64 `json:"ms"`
	// From is FromAgent or FromClient.
	From string `json:"from"`
	// Msg is the message as it was written, redacted.
	Msg json.RawMessage `json:"msg"`
}

// Transcript is an ACP conversation recorded with a real agent: a header
// line, then one TranscriptLine per message, as JSON lines.
type Transcript struct {
	Header TranscriptHeader
	Lines  []TranscriptLine
}

// ReadTranscript reads a transcript file.
func ReadTranscript(path string) (Transcript, error) {
	f, err := os.Open(path)
	if err != nil {
		return Transcript{}, fmt.Errorf("read transcript: %w", err)
	}
	defer f.Close()
	var tr Transcript
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 0; sc.Scan(); n++ {
		if n == 0 {
			if err := json.Unmarshal(sc.Bytes(), &tr.Header); err != nil {
				return Transcript{}, fmt.Errorf("transcript %s header: %w", path, err)
			}
			continue
		}
		var l TranscriptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return Transcript{}, fmt.Errorf("transcript %s line %d: %w", path, n+1, err)
		}
		if l.From != FromAgent && l.From != FromClient {
			return Transcript{}, fmt.Errorf("transcript %s line %d: from %q", path, n+1, l.From)
		}
		tr.Lines = append(tr.Lines, l)
	}
	if err := sc.Err(); err != nil {
		return Transcript{}, fmt.Errorf("transcript %s: %w", path, err)
	}
	return tr, nil
}

// Write writes the transcript to path as JSON lines.
func (tr Transcript) Write(path string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tr.Header); err != nil {
		return fmt.Errorf("write transcript: %w", err)
	}
	for _, l := range tr.Lines {
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("write transcript: %w", err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write transcript: %w", err)
	}
	return nil
}

// TranscriptSpec returns a launch Spec that runs HelperReplay on the
// transcript at path (absolute) in the current test binary. Dir is left
// for the caller.
func TranscriptSpec(provider, path string) backends.Spec {
	exe, err := os.Executable()
	if err != nil {
		panic(fmt.Sprintf("agenttest: executable: %v", err))
	}
	return backends.Spec{
		Provider: provider,
		Kind:     backends.KindACP,
		Path:     exe,
		Env:      []string{EnvHelper + "=" + HelperReplay, EnvTranscript + "=" + path},
	}
}

// rpc is the envelope of a JSON-RPC message.
type rpc struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
}

func (m rpc) isRequest() bool  { return m.Method != "" && len(m.ID) > 0 }
func (m rpc) isResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// ErrTranscriptUnfinished is returned by ReplayTranscript when the client
// went away before the transcript's end.
var ErrTranscriptUnfinished = errors.New("client went away before the transcript's end")

// ReplayTranscript plays the agent's side of tr to a live client on in and
// out. The client's recorded messages are the points the replay waits for: a
// recorded request waits for the client's next request of the same method
// (the recorded answer then goes out with the client's id), a recorded
// notification for one of the same method, a recorded answer to the
// agent's request for the answer with that id. The agent's lines between
// two such points are written in order, at once, with PlaceholderCwd
// replaced by cwd. A client message the transcript does not expect is
// answered with method-not-found if it is a request and otherwise ignored.
// After the transcript's end it keeps answering so until the client
// closes in; it returns ErrTranscriptUnfinished when in ends earlier.
func ReplayTranscript(tr Transcript, cwd string, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	w := bufio.NewWriter(out)
	send := func(b []byte) error {
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return w.Flush()
	}
	stray := func(m rpc) error {
		if !m.isRequest() {
			return nil
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID,
			"error": map[string]any{"code": -32601, "message": "Method not found", "data": map[string]string{"method": m.Method}}})
		return send(b)
	}
	ids := map[string]json.RawMessage{} // recorded client request id -> live id
	cwdJSON, _ := json.Marshal(cwd)
	cwdText := string(cwdJSON[1 : len(cwdJSON)-1])
	for i, l := range tr.Lines {
		var rec rpc
		if err := json.Unmarshal(l.Msg, &rec); err != nil {
			return fmt.Errorf("transcript line %d: %w", i+2, err)
		}
		if l.From == FromAgent {
			msg := bytes.ReplaceAll(l.Msg, []byte(PlaceholderCwd), []byte(cwdText))
			if live, ok := ids[string(rec.ID)]; ok && rec.isResponse() {
				msg = withID(msg, live)
			}
			if err := send(msg); err != nil {
				return fmt.Errorf("replay line %d: %w", i+2, err)
			}
			continue
		}
		for {
			if !sc.Scan() {
				return fmt.Errorf("%w: waiting for %s (line %d of %d)", ErrTranscriptUnfinished, describe(rec), i+2, len(tr.Lines)+1)
			}
			var m rpc
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				continue
			}
			if matches(rec, m) {
				if rec.isRequest() {
					ids[string(rec.ID)] = append(json.RawMessage(nil), m.ID...)
				}
				break
			}
			if err := stray(m); err != nil {
				return err
			}
		}
	}
	for sc.Scan() {
		var m rpc
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			if err := stray(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// matches says whether the live client message m is the recorded one.
func matches(rec, m rpc) bool {
	switch {
	case rec.isResponse():
		return m.isResponse() && string(m.ID) == string(rec.ID)
	case rec.isRequest():
		return m.isRequest() && m.Method == rec.Method
	default:
		return m.Method == rec.Method && len(m.ID) == 0
	}
}

func describe(m rpc) string {
	if m.isResponse() {
		return "the answer to request " + string(m.ID)
	}
	return strings.TrimSpace(m.Method)
}

// withID returns msg with its id replaced.
func withID(msg []byte, id json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return msg
	}
	m["id"] = id
	b, err := json.Marshal(m)
	if err != nil {
		return msg
	}
	return b
}

// replayMain is the HelperReplay process.
func replayMain() {
	tr, err := ReadTranscript(os.Getenv(EnvTranscript))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay agent:", err)
		os.Exit(2)
	}
	cwd, _ := os.Getwd()
	if err := ReplayTranscript(tr, cwd, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "replay agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
