package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/pty"
)

// Terminal is what an attach stream needs of a terminal agent's backend;
// *pty.Backend satisfies it. A backend from Pool.Backend that is not a
// Terminal cannot be attached to (409 unsupported).
type Terminal interface {
	// Attach streams the terminal's output to viewer, beginning with a
	// redraw of the screen.
	Attach(viewer string) (*pty.Attachment, error)
	// TakeInput makes viewer the one writer (pty.ErrInputHeld while
	// another holds it); ReleaseInput gives it up.
	TakeInput(viewer string) error
	ReleaseInput(viewer string)
	// Input types p for viewer, which must hold the input (pty.ErrNotWriter).
	Input(viewer string, p []byte) error
	// Resize sets the terminal size (pty.ErrBadSize out of range).
	Resize(cols, rows int) error
}

var _ Terminal = (*pty.Backend)(nil)

// Control message types of an attach stream (text frames holding an
// AttachMessage). The client sends resize, take and release; the server
// answers take with taken, release with released, and any refused
// message with error.
const (
	AttachResize   = "resize"
	AttachTake     = "take"
	AttachRelease  = "release"
	AttachTaken    = "taken"
	AttachReleased = "released"
	AttachError    = "error"
)

// Codes of attach error messages, besides CodeBadRequest.
const (
	// CodeNotWriter: keystrokes or a resize from a viewer that does not
	// hold the input; they were dropped.
	CodeNotWriter = "not_writer"
	// CodeInputHeld: take refused, another viewer holds the input.
	CodeInputHeld = "input_held"
	// CodeTerminal: the terminal refused the message (it has exited, or
	// an I/O error).
	CodeTerminal = "terminal"
)

// Reasons of the close frame that ends an attach stream, with the close
// status each comes with.
const (
	// AttachEndExited (1000 normal closure): the agent exited.
	AttachEndExited = "exited"
	// AttachEndShutdown (1001 going away): the daemon is shutting down.
	AttachEndShutdown = "shutdown"
	// AttachEndDropped (1013 try again later): the viewer fell behind.
	AttachEndDropped = "dropped"
)

// maxAttachMessage bounds one message a client sends (a paste, a control).
const maxAttachMessage = 1 << 20

// viewerIDBytes is the entropy of a connection's viewer name.
const viewerIDBytes = 8

// AttachMessage is a control message of an attach stream.
type AttachMessage struct {
	// Type is one of the Attach constants.
	Type string `json:"type"`
	// Cols and Rows are the size of a resize.
	Cols int `json:"cols,omitempty"`
	Rows int `json:"rows,omitempty"`
	// Code and Message describe an error (Code one of the Code constants).
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// attach serves GET /v1/sessions/{id}/attach?agent=ID: a WebSocket on the
// terminal of the session's agent (the active one without ?agent). Binary
// frames carry raw output to the client and keystrokes from it; text
// frames carry AttachMessages. Every connection is its own viewer.
//
// Browsers cannot set headers on a WebSocket, so besides the
// Authorization header (the CLI's way) a single-use ticket of this session
// (POST .../attach-ticket) is accepted as ?ticket=. An upgrade from another
// origin is refused before any ticket is looked at (the Origin, when sent,
// must be the request's own scheme and Host). The host that checked the
// credential forwards the upgrade to the session's owner, if another.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get("Origin") != "" && !originMatches(r) {
		return errCrossOrigin
	}
	id, agent := r.PathValue("id"), r.URL.Query().Get("agent")
	p, err := s.authenticate(r)
	if err != nil && hostClaim(r) {
		return err // no ticket makes up for an unproven claim to be a host
	}
	if err != nil && !s.ticketAuthorized(r, id) {
		return errUnauthorized
	}
	s.conns.prove(r)
	r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
	if handled, err := s.forwardSession(w, r, id); handled {
		return err
	}
	if err := s.holdStream(); err != nil {
		return err
	}
	defer s.streams.Done()
	ctx, cancel := s.longContext(r)
	defer cancel()

	b, err := s.pool.Backend(ctx, id, agent)
	if err != nil {
		return s.shutdownErr(err)
	}
	term, ok := b.(Terminal)
	if !ok {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported,
			Message: fmt.Sprintf("agent %q of session %q has no terminal to attach to", agent, id)}
	}
	viewer, err := newViewerName()
	if err != nil {
		return err
	}
	att, err := term.Attach(viewer)
	if errors.Is(err, backends.ErrExited) || errors.Is(err, backends.ErrNotStarted) {
		return &Error{Status: http.StatusConflict, Code: CodeUnsupported, Message: fmt.Sprintf("attach: %v", err)}
	}
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer att.Close()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxAttachMessage)
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	s.serveAttach(ctx, conn, term, att)
	return nil
}

// serveAttach pumps output to conn and conn's messages to the terminal
// until one side ends, then closes conn with the reason.
func (s *Server) serveAttach(ctx context.Context, conn *websocket.Conn, term Terminal, att *pty.Attachment) {
	v := &attachViewer{conn: conn, term: term, name: att.Viewer(), timeout: s.cfg.WriteTimeout}
	readDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(readDone)
		v.readLoop()
	}()
	defer wg.Wait()
	for {
		select {
		case p, ok := <-att.Output():
			if !ok {
				if errors.Is(att.Err(), pty.ErrSlowViewer) {
					v.close(websocket.StatusTryAgainLater, AttachEndDropped)
				} else {
					v.close(websocket.StatusNormalClosure, AttachEndExited)
				}
				return
			}
			if err := v.write(websocket.MessageBinary, p); err != nil {
				_ = conn.CloseNow()
				return
			}
		case <-readDone:
			_ = conn.CloseNow()
			return
		case <-ctx.Done():
			v.close(websocket.StatusGoingAway, AttachEndShutdown)
			return
		}
	}
}

// attachViewer is one connection's side of an attach stream.
type attachViewer struct {
	conn    *websocket.Conn
	term    Terminal
	name    string
	timeout time.Duration
	writer  bool // the viewer holds the input (read loop only)
}

// write sends one message within the write timeout; a client that reads
// no faster is cut off.
func (v *attachViewer) write(typ websocket.MessageType, p []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
	defer cancel()
	return v.conn.Write(ctx, typ, p)
}

// send writes a control message.
func (v *attachViewer) send(m AttachMessage) {
	b, _ := json.Marshal(m)
	_ = v.write(websocket.MessageText, b)
}

// fail sends an error message.
func (v *attachViewer) fail(code string, err error) {
	v.send(AttachMessage{Type: AttachError, Code: code, Message: err.Error()})
}

// close ends the stream with a close frame (the handshake is bounded by
// the library).
func (v *attachViewer) close(code websocket.StatusCode, reason string) {
	_ = v.conn.Close(code, reason)
}

// readLoop handles the client's messages until the connection ends.
func (v *attachViewer) readLoop() {
	for {
		typ, p, err := v.conn.Read(context.Background())
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			v.input(p)
			continue
		}
		var m AttachMessage
		if err := json.Unmarshal(p, &m); err != nil {
			v.fail(CodeBadRequest, fmt.Errorf("control message: %w", err))
			continue
		}
		v.control(m)
	}
}

// input types keystrokes, or tells a non-writer they were dropped.
func (v *attachViewer) input(p []byte) {
	err := v.term.Input(v.name, p)
	switch {
	case errors.Is(err, pty.ErrNotWriter):
		v.fail(CodeNotWriter, errors.New("keystrokes dropped: send {\"type\":\"take\"} first"))
	case err != nil:
		v.fail(CodeTerminal, err)
	}
}

// control applies one control message.
func (v *attachViewer) control(m AttachMessage) {
	switch m.Type {
	case AttachResize:
		if !v.writer {
			v.fail(CodeNotWriter, errors.New("resize refused: only the viewer holding the input may resize"))
			return
		}
		if err := v.term.Resize(m.Cols, m.Rows); errors.Is(err, pty.ErrBadSize) {
			v.fail(CodeBadRequest, err)
		} else if err != nil {
			v.fail(CodeTerminal, err)
		}
	case AttachTake:
		err := v.term.TakeInput(v.name)
		switch {
		case errors.Is(err, pty.ErrInputHeld):
			v.fail(CodeInputHeld, errors.New("another viewer holds the input"))
		case err != nil:
			v.fail(CodeTerminal, err)
		default:
			v.writer = true
			v.send(AttachMessage{Type: AttachTaken})
		}
	case AttachRelease:
		v.term.ReleaseInput(v.name)
		v.writer = false
		v.send(AttachMessage{Type: AttachReleased})
	default:
		v.fail(CodeBadRequest, fmt.Errorf("unknown control message type %q", m.Type))
	}
}

// newViewerName returns a fresh viewer name for one connection, so that
// no connection can type under another's name.
func newViewerName() (string, error) {
	b := make([]byte, viewerIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("viewer name: %w", err)
	}
	return "ws-" + hex.EncodeToString(b), nil
}
