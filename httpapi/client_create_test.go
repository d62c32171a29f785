package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/pool"
)

// createStreamServer serves POST /v1/sessions and GET its events from
// five stored events, as the daemon would: as an event stream cut after
// the answer and `cut` events (-1: none; 0: not cut, the stream goes on to the
// session's close), or, with asJSON, as the JSON answer alone.
func createStreamServer(t *testing.T, cut int, asJSON bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var gets atomic.Int32
	evs := make([]backends.Event, 5)
	for i := range evs {
		evs[i] = backends.Event{Seq: int64(i + 1), Session: "s1", Type: backends.EventMessageChunk, Data: backends.MustJSON(map[string]int{"n": i + 1})}
	}
	answer := CreatedSession{Session: pool.Session{ID: "s1"}, FirstTurn: &pool.Turn{ID: 1}}
	send := func(w http.ResponseWriter, ev backends.Event, withID bool) {
		b, _ := json.Marshal(ev)
		if withID {
			fmt.Fprintf(w, "id: %d\n", ev.Seq)
		}
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, b)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		if asJSON {
			writeJSON(w, http.StatusCreated, answer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusCreated)
		send(w, backends.Event{Session: "s1", Type: EventCreateResult, Data: backends.MustJSON(answer)}, false)
		for _, ev := range evs {
			if cut != 0 && ev.Seq > int64(max(cut, 0)) {
				return // the connection ends without stream.end
			}
			send(w, ev, true)
		}
		send(w, backends.Event{Type: EventStreamEnd, Data: backends.MustJSON(EndData{Reason: EndClosed, LastSeq: 5})}, false)
	})
	mux.HandleFunc("GET /v1/sessions/s1/events", func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		after, _ := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range evs {
			if ev.Seq > after {
				send(w, ev, true)
			}
		}
		send(w, backends.Event{Type: EventStreamEnd, Data: backends.MustJSON(EndData{Reason: EndClosed, LastSeq: 5})}, false)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &gets
}

// CreateStream gives the answer first, then every event once and in
// order: from the one stream, from a stream cut short and resumed with
// GET …/events after the last event seen, and from a daemon that answers
// as JSON (followed with GET …/events from the start).
func TestCreateStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cut      int
		asJSON   bool
		wantGets int32
	}{
		{"one stream", 0, false, 0},
		{"cut after 2", 2, false, 1},
		{"cut before any", -1, false, 1},
		{"json answer", 0, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, gets := createStreamServer(t, tc.cut, tc.asJSON)
			c := &Client{BaseURL: srv.URL, ReconnectDelay: 1}
			var seqs []int64
			answered := false
			cs, err := c.CreateStream(context.Background(), CreateSessionRequest{CreateRequest: pool.CreateRequest{Repo: "r", Agent: "a"}, Prompt: "go"},
				func(cs CreatedSession) error {
					if len(seqs) > 0 || cs.ID != "s1" || cs.FirstTurn == nil {
						t.Errorf("answer %+v after %d events", cs, len(seqs))
					}
					answered = true
					return nil
				},
				func(ev backends.Event) error {
					seqs = append(seqs, ev.Seq)
					return nil
				})
			if err != nil || cs.ID != "s1" || !answered {
				t.Fatalf("CreateStream = %+v, %v (answered %v)", cs, err, answered)
			}
			if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
				t.Errorf("events delivered: %v; want 1 to 5, each once", seqs)
			}
			if got := gets.Load(); got != tc.wantGets {
				t.Errorf("GET …/events sent %d times; want %d", got, tc.wantGets)
			}
		})
	}
}
