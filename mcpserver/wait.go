package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// States of a turn in a wait's report.
const (
	stateRunning    = "running"
	stateEnded      = "ended"
	statePermission = "waiting_for_permission"
	stateClosed     = "session_closed"
)

// chunkNoteEvery spaces the progress notifications about streamed text.
const chunkNoteEvery = time.Second

// turnReport is what waiting for a turn found.
type turnReport struct {
	Session     string            `json:"session"`
	Turn        int64             `json:"turn"`
	Agent       string            `json:"agent,omitempty"`
	State       string            `json:"state"`
	StopReason  string            `json:"stop_reason,omitempty"`
	Error       string            `json:"error,omitempty"`
	DurationMS  int64             `json:"duration_ms,omitempty"`
	Text        string            `json:"text,omitempty"`
	TextCut     bool              `json:"text_cut,omitempty"`
	Changes     *pool.DiffStat    `json:"changes,omitempty"`
	Files       []pool.FileChange `json:"files,omitempty"`
	Permissions []pendingView     `json:"permissions,omitempty"`
	ToolCalls   int               `json:"tool_calls"`
	Chunks      int               `json:"chunks"`
	LastTool    string            `json:"last_tool,omitempty"`
	Waited      string            `json:"waited,omitempty"`
}

// turnEndData is the payload of turn.ended that a report uses.
type turnEndData struct {
	StopReason string         `json:"stop_reason"`
	Error      string         `json:"error"`
	DurationMS int64          `json:"duration_ms"`
	Changes    *pool.DiffStat `json:"changes"`
}

// eventPayload is the part of other events' payloads a wait reads.
type eventPayload struct {
	Role  string `json:"role"`
	Text  string `json:"text"`
	Title string `json:"title"`
}

// wait follows turn of session for at most d and reports how it stands:
// ended, still running, waiting for a permission answer, or its session
// closed. The text of the report is the agent's message chunks of the
// turn, joined. While it waits it sends progress notifications, if the
// caller gave a progress token.
func (s *Server) wait(ctx context.Context, req *mcp.CallToolRequest, api API, session string, turn int64, d time.Duration) (turnReport, error) {
	t, err := api.Turn(ctx, session, turn, false)
	if err != nil {
		return turnReport{}, err
	}
	rep := turnReport{Session: session, Turn: turn, Agent: t.Agent, State: stateRunning}
	started := time.Now()
	p := newProgress(ctx, req, s.logger)
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stopBeat := p.heartbeat(s.cfg.Heartbeat, func() string {
		return fmt.Sprintf("turn %d still running (waited %s)", turn, time.Since(started).Round(time.Second))
	})
	defer stopBeat()

	var text strings.Builder
	apart := false // an event since the last chunk ends the message it was part of
	keep := 2 * s.cfg.MaxText
	from := s.startOf(session, turn)
	known := from > 0 // the events read are all after the prompt
	err = api.Events(wctx, session, from, func(ev backends.Event) error {
		if ev.Turn != turn {
			if known && ev.Turn == 0 {
				if msg := beforeTurn(ev, t.Agent); msg != "" {
					p.send(fmt.Sprintf("turn %d: %s", turn, msg))
				}
			}
			return nil
		}
		if from == 0 {
			// A turn this server did not start: the next wait for it
			// reads from its first event on, not the session's first.
			from = ev.Seq - 1
			s.rememberStart(session, turn, from)
		}
		if separates(ev.Type) {
			apart = true
		}
		var pl eventPayload
		switch ev.Type {
		case backends.EventMessageChunk:
			if json.Unmarshal(ev.Data, &pl) != nil || pl.Role != backends.RoleAgent {
				return nil
			}
			if apart && text.Len() > 0 && !strings.HasSuffix(text.String(), "\n") {
				// A message after a tool call or a permission is another
				// message: on its own line, not glued to the last one.
				prev := strings.TrimRight(text.String(), " \t")
				text.Reset()
				text.WriteString(prev + "\n")
			}
			apart = false
			text.WriteString(pl.Text)
			if text.Len() > keep { // keep the end, where the final answer is
				rest, _ := tail(text.String(), s.cfg.MaxText)
				text.Reset()
				text.WriteString(rest)
				rep.TextCut = true
			}
			rep.Chunks++
			p.throttled(chunkNoteEvery, fmt.Sprintf("turn %d: the agent is writing (%d chunks)", turn, rep.Chunks))
		case backends.EventToolCall:
			_ = json.Unmarshal(ev.Data, &pl)
			rep.ToolCalls++
			rep.LastTool = oneLine(pl.Title, 120)
			p.send(fmt.Sprintf("turn %d: tool call %d: %s", turn, rep.ToolCalls, rep.LastTool))
		case backends.EventPermissionRequest:
			pend, err := api.Permissions(ctx, session)
			if err != nil {
				return err
			}
			for _, pd := range pend {
				if pd.Request.Turn == turn || pd.Request.Turn == 0 {
					rep.Permissions = append(rep.Permissions, viewPending(pd))
				}
			}
			if len(rep.Permissions) > 0 {
				rep.State = statePermission
				p.send(fmt.Sprintf("turn %d: the agent waits for a permission answer", turn))
				return httpapi.ErrStop
			}
		case backends.EventTurnEnded:
			var end turnEndData
			_ = json.Unmarshal(ev.Data, &end)
			rep.State, rep.StopReason, rep.Error, rep.DurationMS, rep.Changes = stateEnded, end.StopReason, end.Error, end.DurationMS, end.Changes
			p.send(fmt.Sprintf("turn %d ended: %s", turn, end.StopReason))
			return httpapi.ErrStop
		}
		return nil
	})
	rep.Waited = time.Since(started).Round(time.Second).String()
	switch {
	case ctx.Err() != nil:
		return rep, ctx.Err()
	case err == nil && rep.State == stateRunning:
		rep.State = stateClosed // the stream ended with the session
	case errors.Is(err, context.DeadlineExceeded):
		// Still running: the report says so.
	case err != nil:
		return rep, err
	}
	rep.Text = text.String()
	if cut, was := tail(rep.Text, s.cfg.MaxText); was {
		rep.Text, rep.TextCut = cut, true
	}
	if rep.State == stateEnded && rep.Changes != nil && rep.Changes.Files > 0 {
		if d, err := api.Diff(ctx, session, turn); err == nil {
			rep.Files = d.Files
		} else {
			s.logger.Debug("diff of an ended turn", "session", session, "turn", turn, "err", err)
		}
	}
	return rep, nil
}

// separates says whether an event of type t, between two agent message
// chunks, puts them in two messages: the agent did something between them.
func separates(t backends.EventType) bool {
	switch t {
	case backends.EventToolCall, backends.EventToolUpdate, backends.EventPermissionRequest, backends.EventPermissionResolved,
		backends.EventFSRead, backends.EventFSWrite, backends.EventTerminalCreated, backends.EventTerminalExited:
		return true
	}
	return false
}

// beforeTurn says what an event outside any turn, after the prompt, means
// for the turn of agent: the session's setup or the agent's start, which
// the turn waits for ("" for other events).
func beforeTurn(ev backends.Event, agent string) string {
	switch {
	case ev.Type == pool.EventSetupStarted:
		return "waiting for the worktree's setup (.agentpool.json) to run"
	case ev.Type == pool.EventSetupEnded:
		return "the worktree's setup ended"
	case ev.Type == backends.EventAgentStarting && ev.Agent == agent:
		return "starting the agent " + agent
	case ev.Type == backends.EventAgentReady && ev.Agent == agent:
		return "the agent " + agent + " is ready"
	}
	return ""
}

// text is the report for a model to read.
func (r turnReport) text() string {
	var b strings.Builder
	switch r.State {
	case stateEnded:
		fmt.Fprintf(&b, "Turn %d of session %s ended: %s", r.Turn, r.Session, r.StopReason)
		if r.DurationMS > 0 {
			fmt.Fprintf(&b, " after %s", (time.Duration(r.DurationMS) * time.Millisecond).Round(100*time.Millisecond))
		}
		b.WriteString(".\n")
		if r.Error != "" {
			fmt.Fprintf(&b, "Error: %s\n", r.Error)
		}
		if r.Changes == nil || r.Changes.Files == 0 {
			b.WriteString("It changed no files.\n")
		} else {
			fmt.Fprintf(&b, "It changed %s (+%d −%d):\n%s", plural(r.Changes.Files, "file"), r.Changes.Additions, r.Changes.Deletions, fileList(r.Files))
		}
		if r.Text == "" {
			b.WriteString("The agent wrote no text.\n")
		} else {
			b.WriteString("The agent's final text")
			if r.TextCut {
				b.WriteString(" (its end only: it was long)")
			}
			b.WriteString(":\n" + r.Text)
			if !strings.HasSuffix(r.Text, "\n") {
				b.WriteByte('\n')
			}
		}
		b.WriteString("Next: get_diff to read the changes; prompt again; merge_session; or close_session.\n")
	case statePermission:
		fmt.Fprintf(&b, "Turn %d of session %s waits for an answer to %s:\n", r.Turn, r.Session, plural(len(r.Permissions), "permission request"))
		for _, p := range r.Permissions {
			b.WriteString(p.text())
		}
		fmt.Fprintf(&b, "Answer with answer_permission (session %q, the request id, a choice), then call wait_turn again.\n", r.Session)
	case stateClosed:
		fmt.Fprintf(&b, "Session %s was closed before turn %d ended.\n", r.Session, r.Turn)
	default:
		fmt.Fprintf(&b, "Turn %d of session %s is still running (waited %s; %s, %d text chunks so far", r.Turn, r.Session, r.Waited, plural(r.ToolCalls, "tool call"), r.Chunks)
		if r.LastTool != "" {
			fmt.Fprintf(&b, "; last tool call: %s", r.LastTool)
		}
		fmt.Fprintf(&b, ").\nCall wait_turn again with session %q and turn %d.\n", r.Session, r.Turn)
	}
	return b.String()
}

// progress sends the progress notifications of one tool call, when its
// caller asked for them with a progress token.
type progress struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	logger  interface{ Debug(string, ...any) }

	mu   sync.Mutex
	n    float64
	last time.Time
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest, logger interface{ Debug(string, ...any) }) *progress {
	p := &progress{ctx: ctx, logger: logger}
	if req != nil && req.Params != nil {
		p.session, p.token = req.Session, req.Params.GetProgressToken()
	}
	return p
}

// send notifies msg, with a progress count one higher than the last.
func (p *progress) send(msg string) {
	if p.token == nil || p.session == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.last = time.Now()
	if err := p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg}); err != nil {
		p.logger.Debug("progress notification", "err", err)
	}
}

// throttled sends msg unless a notification went out within every.
func (p *progress) throttled(every time.Duration, msg string) {
	p.mu.Lock()
	recent := time.Since(p.last) < every
	p.mu.Unlock()
	if !recent {
		p.send(msg)
	}
}

// heartbeat sends msg() every period in which nothing else was sent, until
// the returned stop is called (which waits for it to end).
func (p *progress) heartbeat(period time.Duration, msg func() string) (stop func()) {
	if p.token == nil || p.session == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.ctx.Done():
				return
			case <-tick.C:
				p.throttled(period, msg())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
