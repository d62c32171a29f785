package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
)

// The SDK connection exists only while something needs it: the handshake,
// a session/set_mode or session/set_config_option call, or a request from
// the agent that the filter does not answer itself (fs writes, terminals,
// permissions, unknown methods). A turn never needs it: turn.go writes
// session/prompt and session/cancel itself and the filter hands the answer
// to the turn. So a warm agent waiting for its next prompt has no SDK
// connection at all, which saves the SDK's fixed 1 MiB receive buffer and
// four goroutines per backend (BenchmarkWarmBackends200 in pool/).
//
// A link is retired when nothing uses it: no call in progress, no request
// of the agent the SDK has not answered yet, no request of the SDK the
// agent has not answered yet (a new link would reuse its ids), and no turn
// running (a turn that woke it keeps it, so a turn of many fs writes makes
// one link, not one per write).

// link is one SDK connection fed by the filter through a pipe.
type link struct {
	conn *acpsdk.ClientSideConnection
	pw   *io.PipeWriter
}

// links tracks the current link and what keeps it alive.
type links struct {
	mu  sync.Mutex
	cur *link
	// users counts calls through the SDK between acquire and release.
	users int
	// inbound counts requests of the agent handed to the SDK and not yet
	// answered by it.
	inbound int
	// outstanding holds the ids of the SDK's requests to the agent that
	// the agent has not answered yet.
	outstanding map[string]struct{}
	// turn is set while a turn runs.
	turn bool
	// ended is set when the agent's output has ended: no new link.
	ended error
	// retired are links closed while idle, waited for by the watcher.
	retired []*link
	// made counts the links made (for tests).
	made int
}

// errLinkEnded is the error of SDK calls after the agent's output ended.
var errLinkEnded = errors.New("the agent's output has ended")

// acquire returns the SDK connection, making one if needed, for one call;
// release must be called when the call has returned.
func (b *Backend) acquire() (*acpsdk.ClientSideConnection, func(), error) {
	ls := &b.links
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ended != nil {
		return nil, nil, fmt.Errorf("%w: %w", backends.ErrExited, ls.ended)
	}
	l := b.linkLocked()
	ls.users++
	var once sync.Once
	return l.conn, func() {
		once.Do(func() {
			ls.mu.Lock()
			ls.users--
			b.retireIdleLocked()
			ls.mu.Unlock()
		})
	}, nil
}

// linkLocked returns the current link, making one if there is none.
// b.links.mu must be held.
func (b *Backend) linkLocked() *link {
	ls := &b.links
	if ls.cur != nil {
		return ls.cur
	}
	pr, pw := io.Pipe()
	conn := acpsdk.NewClientSideConnection(client{b}, linkWriter{b}, pr)
	conn.SetLogger(slog.New(quietInfo{b.logger.Handler()}))
	ls.cur = &link{conn: conn, pw: pw}
	ls.made++
	return ls.cur
}

// retireIdleLocked closes the current link when nothing keeps it alive.
// b.links.mu must be held.
func (b *Backend) retireIdleLocked() {
	ls := &b.links
	l := ls.cur
	if l == nil || ls.users > 0 || ls.inbound > 0 || len(ls.outstanding) > 0 || ls.turn {
		return
	}
	ls.cur = nil
	// The SDK's reader sees the end of its stream and shuts the
	// connection down; its goroutines end with it.
	_ = l.pw.Close()
	kept := ls.retired[:0]
	for _, r := range ls.retired {
		select {
		case <-r.conn.Done():
		default:
			kept = append(kept, r)
		}
	}
	ls.retired = append(kept, l)
}

// holdForTurn keeps a link made during a turn until the turn ends, and
// retires it then if nothing else uses it.
func (b *Backend) holdForTurn(on bool) {
	ls := &b.links
	ls.mu.Lock()
	ls.turn = on
	if !on {
		b.retireIdleLocked()
	}
	ls.mu.Unlock()
}

// forward hands a line of the agent that the filter does not handle to the
// SDK: requests (making a link when needed), answers to the SDK's own
// requests, and $/cancel_request. Anything else with no link to take it is
// dropped.
func (b *Backend) forward(line []byte, id json.RawMessage, method string) {
	ls := &b.links
	ls.mu.Lock()
	if ls.ended != nil {
		ls.mu.Unlock()
		return
	}
	var l *link
	switch {
	case method != "" && isRequestID(id):
		l = b.linkLocked()
		ls.inbound++
	case method == "":
		if _, ok := ls.outstanding[string(id)]; ok {
			delete(ls.outstanding, string(id))
		}
		l = ls.cur
	default:
		l = ls.cur
	}
	ls.mu.Unlock()
	if l == nil {
		b.logger.Debug("dropping a message no request waits for", "id", string(id), "method", method)
		return
	}
	// An error means the link was retired or its connection ended; the
	// call that waited for this line has given up already.
	_, _ = l.pw.Write(append(line, '\n'))
}

// endLinks closes the current link with cause when the agent's output has
// ended, so calls waiting on it fail, and allows no new one.
func (b *Backend) endLinks(cause error) {
	ls := &b.links
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if cause == nil {
		cause = errLinkEnded
	}
	ls.ended = cause
	if ls.cur != nil {
		_ = ls.cur.pw.CloseWithError(cause)
		ls.retired = append(ls.retired, ls.cur)
		ls.cur = nil
	}
}

// waitLinks waits until every link made has shut down; the agent's output
// must have ended.
func (b *Backend) waitLinks() {
	b.links.mu.Lock()
	all := b.links.retired
	b.links.retired = nil
	b.links.mu.Unlock()
	for _, l := range all {
		<-l.conn.Done()
	}
}

// linkWriter is the SDK's way to the agent. It keeps the counts that decide
// when a link may be retired: the ids of the SDK's requests, and the
// answers to requests of the agent.
type linkWriter struct{ b *Backend }

func (w linkWriter) Write(p []byte) (int, error) {
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.Unmarshal(p, &env)
	ls := &w.b.links
	request := env.Method != "" && isRequestID(env.ID)
	if request {
		// Before the write: the answer may come back at once.
		ls.mu.Lock()
		if ls.outstanding == nil {
			ls.outstanding = map[string]struct{}{}
		}
		ls.outstanding[string(env.ID)] = struct{}{}
		ls.mu.Unlock()
	}
	n, err := w.b.out.Write(p)
	if env.Method == "" && len(env.ID) > 0 {
		ls.mu.Lock()
		ls.inbound = max(0, ls.inbound-1)
		w.b.retireIdleLocked()
		ls.mu.Unlock()
	}
	return n, err
}

// quietInfo logs the SDK's Info records at Debug: it says "connection
// closed" each time a link is retired, which is routine here.
type quietInfo struct{ slog.Handler }

func (h quietInfo) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, l)
}

func (h quietInfo) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietInfo) WithAttrs(as []slog.Attr) slog.Handler { return quietInfo{h.Handler.WithAttrs(as)} }

func (h quietInfo) WithGroup(name string) slog.Handler { return quietInfo{h.Handler.WithGroup(name)} }
