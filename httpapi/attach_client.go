package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"
)

// AttachEnd is the error Next returns when the server ended the stream
// with a close frame: Reason is one of the AttachEnd constants ("exited",
// "shutdown", "dropped") or empty.
type AttachEnd struct {
	// Status is the WebSocket close status.
	Status int
	// Reason is the close frame's reason.
	Reason string
}

// Error returns "attach ended: reason (status)".
func (e *AttachEnd) Error() string {
	return fmt.Sprintf("attach ended: %s (%d)", e.Reason, e.Status)
}

// AttachConn is the client side of an attach stream. Next must be called
// from one goroutine; the senders may be called from any.
type AttachConn struct {
	conn *websocket.Conn
}

// Attach opens the terminal of a session's agent (agent "" for the active
// one). A refusal before the upgrade (unknown session, not a terminal
// agent, bad token) is an *Error.
func (c *Client) Attach(ctx context.Context, session, agent string) (*AttachConn, error) {
	u := strings.TrimRight(c.BaseURL, "/") + "/v1/sessions/" + url.PathEscape(session) + "/attach"
	if agent != "" {
		u += "?" + url.Values{"agent": {agent}}.Encode()
	}
	opts := &websocket.DialOptions{HTTPClient: c.httpClient(), HTTPHeader: http.Header{}}
	if c.Token != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+c.Token)
	}
	var conn *websocket.Conn
	for try := 0; ; try++ {
		c, resp, err := websocket.Dial(ctx, u, opts)
		if err == nil {
			conn = c
			break
		}
		if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("attach %s: %w", session, err)
		}
		aerr := answerError(resp)
		if try > 0 || !IsCode(aerr, CodeSessionMoved) {
			return nil, aerr
		}
		// Once: the session's new owner answers now.
	}
	conn.SetReadLimit(-1) // output chunks are bounded by the server's terminal reads
	return &AttachConn{conn: conn}, nil
}

// answerError turns a refused upgrade's answer into an *Error.
func answerError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, Code: CodeInternal, Message: http.StatusText(resp.StatusCode)}
	if resp.Body != nil {
		var body errorBody
		if b, err := io.ReadAll(resp.Body); err == nil && json.Unmarshal(b, &body) == nil && body.Error != nil {
			body.Error.Status = resp.StatusCode
			return body.Error
		}
	}
	return e
}

// Next returns the next output chunk (msg zero) or control message
// (output nil). When the server closes the stream it returns an
// *AttachEnd; a cancelled ctx closes the connection.
func (a *AttachConn) Next(ctx context.Context) (output []byte, msg AttachMessage, err error) {
	typ, p, err := a.conn.Read(ctx)
	if err != nil {
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return nil, AttachMessage{}, &AttachEnd{Status: int(ce.Code), Reason: ce.Reason}
		}
		return nil, AttachMessage{}, fmt.Errorf("attach: %w", err)
	}
	if typ == websocket.MessageBinary {
		return p, AttachMessage{}, nil
	}
	if err := json.Unmarshal(p, &msg); err != nil {
		return nil, AttachMessage{}, fmt.Errorf("attach: control message %q: %w", p, err)
	}
	return nil, msg, nil
}

// Input sends keystrokes; they reach the terminal only while this
// connection holds the input (else an error message comes back).
func (a *AttachConn) Input(ctx context.Context, p []byte) error {
	return a.conn.Write(ctx, websocket.MessageBinary, p)
}

// Send sends a control message.
func (a *AttachConn) Send(ctx context.Context, m AttachMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return a.conn.Write(ctx, websocket.MessageText, b)
}

// Take asks for the input; the answer (taken or an input_held error)
// comes through Next.
func (a *AttachConn) Take(ctx context.Context) error {
	return a.Send(ctx, AttachMessage{Type: AttachTake})
}

// Release gives up the input.
func (a *AttachConn) Release(ctx context.Context) error {
	return a.Send(ctx, AttachMessage{Type: AttachRelease})
}

// Resize asks for a new terminal size (only the input's holder may).
func (a *AttachConn) Resize(ctx context.Context, cols, rows int) error {
	return a.Send(ctx, AttachMessage{Type: AttachResize, Cols: cols, Rows: rows})
}

// Close ends the stream with a normal close frame.
func (a *AttachConn) Close() error {
	err := a.conn.Close(websocket.StatusNormalClosure, "")
	if err != nil && websocket.CloseStatus(err) == -1 && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("attach: close: %w", err)
	}
	return nil
}
