package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends"
)

// DefaultReconnectDelay is the pause before Events reconnects a stream.
const DefaultReconnectDelay = 250 * time.Millisecond

// maxReconnects is how many reconnections in a row may fail to deliver
// anything before Events gives up.
const maxReconnects = 8

// maxEventLine bounds one line of an event stream.
const maxEventLine = 16 << 20

// Errors of the event readers.
var (
	// ErrStop, returned by an Events callback, ends the stream; Events
	// then returns nil.
	ErrStop = errors.New("stop reading events")
	// ErrShutdown is returned by Events when the daemon shut down.
	ErrShutdown = errors.New("the daemon shut down")
)

// callbackError carries an error of the caller's callback out of stream.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// Events calls fn for every event of session after seq `after`, stored
// then live, in order, each exactly once: when the stream is dropped (the
// subscriber fell behind, or the connection broke) it reconnects with
// Last-Event-ID. It returns nil when the session is closed or fn returns
// ErrStop; fn's other errors; ErrShutdown when the daemon shuts down; an
// *Error when the API refuses (e.g. not_found); ctx's error when it ends;
// or the transport error when reconnecting keeps failing.
func (c *Client) Events(ctx context.Context, session string, after int64, fn func(backends.Event) error) error {
	return c.follow(ctx, sessionPath(session, "events"), after, true, fn)
}

// EventLog returns the stored events of session after seq `after`.
func (c *Client) EventLog(ctx context.Context, session string, after int64) ([]backends.Event, error) {
	var out []backends.Event
	end, _, _, err := c.stream(ctx, sessionPath(session, "events")+"?follow=false", after, true, func(ev backends.Event) error {
		out = append(out, ev)
		return nil
	})
	if err == nil && (end == nil || end.Reason != EndBacklog) {
		err = fmt.Errorf("event log of %q: %w", session, io.ErrUnexpectedEOF)
	}
	return out, err
}

// DaemonEvents follows the daemon-wide stream (pool.status first, then
// session, agent, turn, permission and provider.changed events),
// reconnecting when dropped; events in a gap are lost, as it has no
// replay. It returns as Events does.
func (c *Client) DaemonEvents(ctx context.Context, fn func(backends.Event) error) error {
	return c.follow(ctx, "/v1/events", 0, false, fn)
}

// follow reads the stream at path, reconnecting after drops; with track,
// from the last seq delivered.
func (c *Client) follow(ctx context.Context, path string, after int64, track bool, fn func(backends.Event) error) error {
	return c.followFrom(ctx, path, after, track, fn, nil)
}

// streamResult is what one connection of an event stream gave (see
// stream).
type streamResult struct {
	end  *EndData
	last int64
	n    int
	err  error
}

// followFrom is follow, with first, when set, the outcome of a first
// connection already read (the stream of POST /v1/sessions) in place of
// the first GET.
func (c *Client) followFrom(ctx context.Context, path string, after int64, track bool, fn func(backends.Event) error, first *streamResult) error {
	delay := c.ReconnectDelay
	if delay <= 0 {
		delay = DefaultReconnectDelay
	}
	last, failures, moved := after, 0, false
	for {
		var r streamResult
		if first != nil {
			r, first = *first, nil
		} else {
			r.end, r.last, r.n, r.err = c.stream(ctx, path, last, track, fn)
		}
		end, got, n, err := r.end, r.last, r.n, r.err
		var cbe callbackError
		var ae *Error
		if IsCode(err, CodeSessionMoved) && !moved {
			moved = true // once: the session's new owner answers now
			continue
		}
		switch {
		case errors.As(err, &cbe):
			if errors.Is(cbe.err, ErrStop) {
				return nil
			}
			return cbe.err
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &ae):
			return err
		case end != nil && (end.Reason == EndClosed || end.Reason == EndBacklog):
			return nil
		case end != nil && end.Reason == EndShutdown:
			return ErrShutdown
		}
		if n > 0 || end != nil {
			failures = 0
		} else if failures++; failures > maxReconnects {
			return fmt.Errorf("event stream %s: %w", path, err)
		}
		last = got
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// stream reads one connection of an event stream. With track, it asks
// for the events after seq `after`, skips any it is sent again and returns
// the last seq delivered. It also returns the stream.end payload if one
// came, how many events it delivered, and the error that ended it
// (callbackError for fn's).
func (c *Client) stream(ctx context.Context, path string, after int64, track bool, fn func(backends.Event) error) (end *EndData, last int64, n int, err error) {
	last = after
	req, err := c.request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, last, n, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if track && after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, last, n, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, last, n, readError(resp)
	}
	return readStream(resp.Body, path, after, track, fn, nil)
}

// readStream reads an event stream from body as stream does; events of
// the stream's own types other than stream.end (create.result) go to
// other, which may be nil.
func readStream(body io.Reader, path string, after int64, track bool, fn func(backends.Event) error, other func(backends.Event) error) (end *EndData, last int64, n int, err error) {
	last = after
	rd := bufio.NewReaderSize(body, 64<<10)
	var typ string
	var data []byte
	for {
		line, err := readLine(rd)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, last, n, fmt.Errorf("read %s: %w", path, err)
		}
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "event":
				typ = string(value)
			case "data":
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
			continue
		}
		if data == nil {
			typ = ""
			continue // a comment or a retry line
		}
		var ev backends.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, last, n, fmt.Errorf("read %s: event %q: %w", path, typ, err)
		}
		typ, data = "", nil
		if ev.Type == EventStreamEnd {
			var ed EndData
			if err := json.Unmarshal(ev.Data, &ed); err != nil {
				return nil, last, n, fmt.Errorf("read %s: stream.end: %w", path, err)
			}
			return &ed, last, n, nil
		}
		if ev.Type == EventCreateResult && other != nil {
			if err := other(ev); err != nil {
				return nil, last, n, callbackError{err}
			}
			continue
		}
		if !track {
			n++
			if err := fn(ev); err != nil {
				return nil, last, n, callbackError{err}
			}
			continue
		}
		if ev.Seq <= last {
			continue // already delivered: never twice
		}
		last = ev.Seq
		n++
		if err := fn(ev); err != nil {
			return nil, last, n, callbackError{err}
		}
	}
}

// readLine returns one line without its LF or CRLF, up to maxEventLine
// bytes.
func readLine(rd *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := rd.ReadSlice('\n')
		line = append(line, frag...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
		if len(line) > maxEventLine {
			return nil, fmt.Errorf("event line longer than %d bytes", maxEventLine)
		}
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// CreateStream creates a session as Create does and follows its event
// stream from the first event, in the same request (POST /v1/sessions
// answered as text/event-stream): created is called with the answer once
// the session exists (with a prompt, its first turn has started), then fn
// with every event of the session, in order and each once, as Events
// does, reconnecting with GET …/events when the stream is dropped. It
// returns as Events does, with the answer once there is one: a session
// exists whenever the answer's ID is set, whatever the error. The create
// itself is sent once: a broken connection before the answer leaves it
// unknown whether the session was made (set req.ID to send it again
// safely).
func (c *Client) CreateStream(ctx context.Context, req CreateSessionRequest, created func(CreatedSession) error, fn func(backends.Event) error) (CreatedSession, error) {
	var out CreatedSession
	hreq, err := c.request(ctx, http.MethodPost, "/v1/sessions", req)
	if err != nil {
		return out, err
	}
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := c.httpClient().Do(hreq)
	if err != nil {
		return out, fmt.Errorf("POST /v1/sessions: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return out, readError(resp)
	}
	answered := func(data []byte) error {
		if err := json.Unmarshal(data, &out); err != nil {
			return fmt.Errorf("POST /v1/sessions: decode answer: %w", err)
		}
		if out.ID == "" {
			return fmt.Errorf("POST /v1/sessions: an answer without a session id")
		}
		if created != nil {
			if err := created(out); err != nil {
				return callbackError{err}
			}
		}
		return nil
	}
	if ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); strings.TrimSpace(ct) != "text/event-stream" {
		// A daemon that answered as JSON: follow the stream on its own.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if err == nil {
			err = answered(b)
		}
		if err != nil {
			return out, unwrapCallback(err)
		}
		return out, c.follow(ctx, sessionPath(out.ID, "events"), 0, true, fn)
	}
	var r streamResult
	r.end, r.last, r.n, r.err = readStream(resp.Body, "/v1/sessions", 0, true, func(ev backends.Event) error {
		if out.ID == "" {
			return fmt.Errorf("POST /v1/sessions: event %s before the answer", ev.Type)
		}
		return fn(ev)
	}, func(ev backends.Event) error { return answered(ev.Data) })
	if out.ID == "" { // no answer: no session to follow
		if r.err == nil {
			r.err = fmt.Errorf("POST /v1/sessions: the stream ended before the answer")
		}
		return out, unwrapCallback(r.err)
	}
	// Its end as GET …/events's: done, or dropped and followed from the
	// last event delivered.
	return out, c.followFrom(ctx, sessionPath(out.ID, "events"), 0, true, fn, &r)
}

// unwrapCallback returns the caller's own error out of a callbackError.
func unwrapCallback(err error) error {
	var cbe callbackError
	if errors.As(err, &cbe) {
		if errors.Is(cbe.err, ErrStop) {
			return nil
		}
		return cbe.err
	}
	return err
}
