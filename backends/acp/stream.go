package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/acpfs"
)

// wireMessage is the envelope of any JSON-RPC message.
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// guardedWriter writes whole messages to the agent's stdin with a deadline.
// A failed or partial write is fatal: the agent is stopped.
type guardedWriter struct {
	mu      sync.Mutex
	f       *os.File
	timeout time.Duration
	wire    func(bool, []byte)
	fail    func(error)
	// dropCancel keeps $/cancel_request notifications from an agent that
	// does not take them (Compat.NoCancelRequest).
	dropCancel bool
}

// Write writes one message (the SDK and the prompt path write a whole
// line at a time).
func (w *guardedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropCancel && isCancelRequest(p) {
		return len(p), nil
	}
	if w.wire != nil {
		w.wire(false, bytes.TrimRight(p, "\n"))
	}
	return w.writeLocked(p)
}

// writeParts writes one message that fill makes in parts, each a write of
// its own under the write timeout, with no other message between them. The
// Wire, if set, gets the whole line once written (a copy made for it only).
func (w *guardedWriter) writeParts(fill func(put func([]byte) error) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var line []byte
	err := fill(func(p []byte) error {
		if w.wire != nil {
			line = append(line, p...)
		}
		_, err := w.writeLocked(p)
		return err
	})
	if w.wire != nil {
		w.wire(false, bytes.TrimRight(line, "\n"))
	}
	return err
}

// writeLocked writes p to the agent, with w.mu held.
func (w *guardedWriter) writeLocked(p []byte) (int, error) {
	_ = w.f.SetWriteDeadline(time.Now().Add(w.timeout))
	n, err := w.f.Write(p)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A partial message cannot be taken back: the stream is broken.
			err = fmt.Errorf("%w: agent stopped reading its stdin (write blocked for %s)", ErrProtocol, w.timeout)
			w.fail(err)
			return n, err
		}
		// A closed pipe means the agent has gone; its exit is reported by
		// the process watcher, with the status and stderr tail.
		return n, fmt.Errorf("write to agent: %w", err)
	}
	return n, nil
}

// filter reads the agent's stdout line by line. It handles session/update
// itself, takes the answer to session/prompt, serves fs reads, answers
// empty-content writes, drops unknown notifications and forwards everything
// else to the SDK (see link.go). It ends the backend on a line that is too
// long or not JSON-RPC.
func (b *Backend) filter(src io.Reader) {
	defer b.wg.Done()
	var cause error
	defer func() { b.endLinks(cause) }()
	r := bufio.NewReaderSize(src, 64<<10)
	var long []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= MaxLine {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
			if len(line) > MaxLine {
				cause = fmt.Errorf("%w: agent sent a line longer than %d bytes", ErrProtocol, MaxLine)
				b.fail(cause)
				return
			}
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if ferr := b.handleLine(bytes.TrimRight(line, "\r\n")); ferr != nil {
				cause = ferr
				b.fail(ferr)
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				cause = fmt.Errorf("read from agent: %w", err)
			}
			return
		}
	}
}

// inbound is what the filter decodes of a line from the agent in one pass:
// the envelope and, for a session/update, its params. Params of another
// shape make the decoding fail, and the line is then decoded again strictly
// as a wireMessage.
type inbound struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	Params struct {
		SessionID string  `json:"sessionId"`
		Update    *update `json:"update"`
	} `json:"params"`
}

func (b *Backend) handleLine(line []byte) error {
	if b.cfg.Wire != nil {
		b.cfg.Wire(true, line)
	}
	var m inbound
	var err error
	span, fast := decodeInbound(line, &m) // fastline.go
	if !fast {
		m = inbound{}
		err = json.Unmarshal(line, &m)
	}
	isUpdate := m.Method == "session/update" && len(m.ID) == 0
	switch {
	case err != nil || (isUpdate && m.Params.Update == nil):
		// An uncommon shape (positional params, a missing update, a
		// malformed line): the envelope alone, strictly.
		var env wireMessage
		if err := json.Unmarshal(line, &env); err != nil || (env.Method == "" && len(env.ID) == 0) {
			return notJSONRPC(line)
		}
		if env.Method == "session/update" && len(env.ID) == 0 {
			return b.handleUpdate(env.Params)
		}
		m = inbound{ID: env.ID, Method: env.Method, Result: env.Result, Error: env.Error}
	case m.Method == "" && len(m.ID) == 0:
		return notJSONRPC(line)
	case isUpdate:
		return b.queueUpdate(m.Params.SessionID, *m.Params.Update, func() json.RawMessage {
			if fast {
				return bytes.Clone(span) // line's buffer is reused
			}
			return rawUpdate(line)
		})
	}
	switch {
	case m.Method == "fs/read_text_file" && isRequestID(m.ID) && b.cfg.FS != nil:
		if req, ok := readRequest(line); ok {
			b.wg.Add(1)
			go func() { defer b.wg.Done(); b.answerRead(m.ID, req) }()
			return nil
		}
	case m.Method == "fs/write_text_file" && len(m.ID) > 0:
		if path, ok := emptyWrite(line); ok {
			b.wg.Add(1)
			go func() { defer b.wg.Done(); b.answerEmptyWrite(m.ID, path) }()
			return nil
		}
	case m.Method != "" && len(m.ID) == 0 && m.Method != "$/cancel_request":
		b.logger.Debug("ignoring unknown notification", "method", m.Method)
		return nil
	case m.Method == "":
		if b.takeAnswer(m.ID, m.Result, m.Error) {
			return nil
		}
	}
	b.forward(line, m.ID, m.Method)
	return nil
}

// takeAnswer takes the agent's answer to the session/prompt in flight, if
// that is what the line with id is, and hands it to the turn: every update
// queued before it belongs to the turn, none after it.
func (b *Backend) takeAnswer(id, result, rerr json.RawMessage) bool {
	b.mu.Lock()
	if b.promptID == "" || string(id) != b.promptID {
		b.mu.Unlock()
		return false
	}
	b.promptMark, b.promptMarked = b.queue.pushedCount(), true
	b.promptID = ""
	var answer chan promptResult
	if b.turn != nil {
		answer = b.turn.answer
	}
	b.mu.Unlock()
	if answer == nil {
		return true
	}
	var r promptResult
	switch {
	case len(rerr) > 0 && string(rerr) != "null":
		var re acpsdk.RequestError
		if err := json.Unmarshal(rerr, &re); err != nil {
			r.err = fmt.Errorf("%w: session/prompt error that is not a JSON-RPC error: %q", ErrProtocol, clip(rerr, 120))
		} else {
			r.err = &re
		}
	default:
		var resp struct {
			StopReason    string          `json:"stopReason"`
			Usage         json.RawMessage `json:"usage"`
			UserMessageID string          `json:"userMessageId"`
			Meta          struct {
				Quota struct {
					TokenCount json.RawMessage `json:"token_count"`
				} `json:"quota"`
			} `json:"_meta"`
		}
		if err := json.Unmarshal(result, &resp); err != nil {
			r.err = fmt.Errorf("%w: session/prompt result: %v", ErrProtocol, err)
		}
		r.stopReason, r.userMessageID = resp.StopReason, resp.UserMessageID
		if len(resp.Usage) > 0 && string(resp.Usage) != "null" {
			r.usage = resp.Usage
		} else {
			r.usage = quotaUsage(resp.Meta.Quota.TokenCount)
		}
	}
	select {
	case answer <- r:
	default:
	}
	return true
}

func notJSONRPC(line []byte) error {
	return fmt.Errorf("%w: agent wrote a line that is not JSON-RPC: %q", ErrProtocol, clip(line, 120))
}

// rawUpdate returns the update of a session/update line already decoded
// once, verbatim.
func rawUpdate(line []byte) json.RawMessage {
	var m struct {
		Params struct {
			Update json.RawMessage `json:"update"`
		} `json:"params"`
	}
	_ = json.Unmarshal(line, &m)
	return m.Params.Update
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// isRequestID reports whether id makes a message a request: present and
// not null (the SDK takes a null id for a notification).
func isRequestID(id json.RawMessage) bool {
	return len(id) > 0 && string(id) != "null"
}

// readRequest decodes an fs/read_text_file line that the SDK would accept;
// any other goes the SDK's way, which answers with its own errors.
func readRequest(line []byte) (acpsdk.ReadTextFileRequest, bool) {
	var m struct {
		Params acpsdk.ReadTextFileRequest `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || m.Params.Validate() != nil {
		return acpsdk.ReadTextFileRequest{}, false
	}
	return m.Params, true
}

// answerRead serves an fs/read_text_file with the same handler as the SDK's
// path (client.ReadTextFile), but encodes the answer once: the SDK encodes
// a result, then compacts it again inside the envelope and reaches the
// handler through a pipe, a second decoding and a goroutine, which cost
// more than the file read itself (BenchmarkReadTextFileACP).
func (b *Backend) answerRead(id json.RawMessage, req acpsdk.ReadTextFileRequest) {
	msg := struct {
		JSONRPC string                       `json:"jsonrpc"`
		ID      json.RawMessage              `json:"id"`
		Result  *acpsdk.ReadTextFileResponse `json:"result,omitempty"`
		Error   *acpsdk.RequestError         `json:"error,omitempty"`
	}{JSONRPC: "2.0", ID: id}
	var err error
	if l, ok := b.cfg.FS.(contentLender); ok {
		// The answer is encoded and written piece by piece while the FS
		// still counts the read against its budget
		// (acpfs.FSConfig.ReadBudget): no copy of the file is held whole.
		client{b}.syncEvents()
		var werr error
		err = l.ReadTextFileFunc(b.withBridgeCheck(b.ctx), req.Path, req.Line, req.Limit, func(c *acpfs.Content) error {
			werr = b.out.writeParts(func(put func([]byte) error) error {
				return writeReadAnswer(put, id, c.Each)
			})
			return nil
		})
		if err == nil {
			if werr != nil {
				b.logger.Debug("fs/read_text_file answer cut short", "path", req.Path, "err", werr)
			}
			return
		}
		msg.Error = toRequestError(err)
	} else {
		resp, err := client{b}.ReadTextFile(b.ctx, req)
		if err != nil {
			msg.Error = toRequestError(err)
		} else {
			msg.Result = &resp
		}
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		msg.Result, msg.Error = nil, acpsdk.NewInternalError(map[string]any{"error": err.Error()})
		raw, _ = json.Marshal(msg)
	}
	_, _ = b.out.Write(append(raw, '\n'))
}

// emptyWrite reports whether an fs/write_text_file line asks for empty
// content, and the path it names.
func emptyWrite(line []byte) (string, bool) {
	var m struct {
		Params struct {
			Path    string  `json:"path"`
			Content *string `json:"content"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || m.Params.Content == nil || *m.Params.Content != "" {
		return "", false
	}
	return m.Params.Path, true
}

// answerEmptyWrite serves an fs/write_text_file with empty content, which
// the SDK rejects before any handler runs although the schema allows it.
func (b *Backend) answerEmptyWrite(id json.RawMessage, path string) {
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if b.cfg.FS == nil {
		resp["error"] = map[string]any{"code": -32601, "message": "Method not found", "data": map[string]any{"method": "fs/write_text_file"}}
	} else if err := b.cfg.FS.WriteTextFile(b.withBridgeCheck(b.ctx), path, ""); err != nil {
		resp["error"] = toRequestError(err)
	} else {
		resp["result"] = map[string]any{}
	}
	raw, _ := json.Marshal(resp)
	_, _ = b.out.Write(append(raw, '\n'))
}

// cancelRequestMethod is the JSON-RPC notification that a request was
// abandoned.
const cancelRequestMethod = "$/cancel_request"

// isCancelRequest reports whether line is a $/cancel_request notification.
func isCancelRequest(line []byte) bool {
	if !bytes.Contains(line, []byte(cancelRequestMethod)) {
		return false
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	return json.Unmarshal(line, &m) == nil && m.Method == cancelRequestMethod && len(m.ID) == 0
}
