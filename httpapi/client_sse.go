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
	delay := c.ReconnectDelay
	if delay <= 0 {
		delay = DefaultReconnectDelay
	}
	last, failures, moved := after, 0, false
	for {
		end, got, n, err := c.stream(ctx, path, last, track, fn)
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
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
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
