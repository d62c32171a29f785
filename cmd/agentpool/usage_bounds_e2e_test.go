package main

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/pool"
)

// TestEndToEndUsageOutOfBounds: an agent that reports a cost of 1.7e308
// in two sessions, a negative and a huge context, and token counts that
// are negative, huge, fractional or not numbers has those numbers
// dropped, each said in the session's events: GET /v1/usage answers with
// finite sums, never a 500 for a sum gone to +Inf.
func TestEndToEndUsageOutOfBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	home := t.TempDir()
	update := func(s string) agenttest.Step {
		return agenttest.Step{Update: json.RawMessage(`{"sessionUpdate":"usage_update",` + s + `}`)}
	}
	script := agenttest.Script{Turns: []agenttest.Turn{{
		Steps: []agenttest.Step{{Chunk: "one"},
			update(`"used":200,"size":1000,"cost":{"amount":0.25,"currency":"USD"}`),
			update(`"used":-1,"size":1e20`),
			// The last cost the agent session reports is the one kept: this
			// one, in two sessions, summed to +Inf.
			update(`"used":100,"size":1000,"cost":{"amount":1.7e308,"currency":"USD"}`)},
		Usage: json.RawMessage(`{"inputTokens":-5,"outputTokens":1e20,"thoughtTokens":1.5,"cachedReadTokens":"NaN","totalTokens":1e400,"cachedWriteTokens":7}`),
	}}}
	writeScripted(t, home, bin, map[string]any{"meter": script})
	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "repo"), map[string]string{"README.md": "hi\n"})
	ctx := context.Background()

	for _, id := range []string{"s-huge-1", "s-huge-2"} {
		if out, err := d.cli("session", "new", "--repo", repo, "--agent", "meter", "--id", id); err != nil {
			t.Fatalf("session new: %v\n%s", err, out)
		}
		if out, err := d.cli("prompt", id, "go"); err != nil {
			t.Fatalf("prompt: %v\n%s", err, out)
		}
	}
	rep, err := d.client.Usage(ctx)
	if err != nil {
		t.Fatalf("GET /v1/usage: %v", err)
	}
	if len(rep.Providers) != 1 || len(rep.Sessions) != 2 {
		t.Fatalf("usage = %+v; want one provider, two sessions", rep)
	}
	finite := func(what string, list []pool.Money) {
		for _, m := range list {
			if math.IsInf(m.Amount, 0) || math.IsNaN(m.Amount) || m.Amount > 1 {
				t.Errorf("%s cost = %v %s; want the out-of-bounds amount left out", what, m.Amount, m.Currency)
			}
		}
	}
	if pr := rep.Providers[0]; len(pr.Cost) != 1 || pr.Cost[0].Amount != 0.5 {
		t.Errorf("provider cost = %+v; want 0.5 USD (two sessions of 0.25)", pr.Cost)
	}
	finite("provider", rep.Providers[0].Cost)
	for _, s := range rep.Sessions {
		finite("session "+s.Session, s.Cost)
		// Only cachedWriteTokens was a sane count; the total is made of
		// the counts kept (none of input, output, thought).
		if s.Tokens.CachedWrite != 7 || s.Tokens.Input != 0 || s.Tokens.Output != 0 || s.Tokens.Total != 0 {
			t.Errorf("session %s tokens = %+v; want only the 7 cached-write tokens", s.Session, s.Tokens)
		}
		for _, a := range s.Agents {
			if a.Context == nil || a.Context.Used != 100 || a.Context.Size != 1000 {
				t.Errorf("session %s context = %+v; want 100/1000", s.Session, a.Context)
			}
		}
	}

	evs, err := d.client.EventLog(ctx, "s-huge-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	dropped := map[string]pool.UsageDropped{}
	for _, ev := range evs {
		if ev.Type != pool.EventUsageDropped {
			continue
		}
		var u pool.UsageDropped
		if err := json.Unmarshal(ev.Data, &u); err != nil {
			t.Fatalf("usage.dropped data %s: %v", ev.Data, err)
		}
		dropped[u.Dropped] = u
	}
	for field, want := range map[string]string{
		"cost.amount": "1.7e308", "used": "-1", "size": "1e20", "inputTokens": "-5", "outputTokens": "1e20",
		"thoughtTokens": "1.5", "cachedReadTokens": `"NaN"`, "totalTokens": "1e400",
	} {
		u, ok := dropped[field]
		if !ok {
			t.Errorf("no usage.dropped for %s; got %+v", field, dropped)
			continue
		}
		if u.Value != want || u.Reason == "" {
			t.Errorf("usage.dropped for %s = %+v; want value %s and a reason", field, u, want)
		}
	}
	out, err := d.cli("events", "s-huge-1")
	if err != nil || !strings.Contains(out, "dropped cost.amount 1.7e308") {
		t.Errorf("events: %v; want the dropped cost said\n%s", err, out)
	}
}
