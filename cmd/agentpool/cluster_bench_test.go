package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// BenchmarkCluster runs three built daemons on one PostgreSQL store,
// 100 sessions of the demo agent on each, every agent warm, and 100 SSE
// subscribers spread over the hosts (each reading a session of one host
// through another, so through forwarding). Each iteration prompts all 300
// sessions at once, each turn streaming `chunks` message chunks as fast
// as the agent can, and waits for every turn to end. Reported:
// events_per_s (events stored by all hosts over the iteration's wall
// time), delivery p50/p99/max (event time to its arrival at a
// subscriber), and whether every session got its turn. It also measures
// a prompt sent to the owner against one sent to another host that
// forwards it (prompt_owner_p50_ms, prompt_forwarded_p50_ms,
// forward_extra_p50_ms). Run it with -benchtime 1x; it needs PostgreSQL.
func BenchmarkCluster(b *testing.B) {
	const perHost, subscribers, chunks = 100, 100, 100
	url := startPostgres(b)
	bin := agentpoolBinary(b)
	key := clusterKeyFile(b)
	script := agenttest.Script{AgentName: "bench", Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: chunks}}}}}
	ids := []string{"host-a", "host-b", "host-c"}
	clients := map[string]*httpapi.Client{}
	for _, id := range ids {
		home := b.TempDir()
		writeScripted(b, home, bin, map[string]any{"stream": script})
		_, c, _ := startBenchDaemonEnv(b, bin, home, []string{"AGENTPOOL_STORE=" + url, "AGENTPOOL_HOST_ID=" + id, clusterKeyEnv + "=" + key},
			"--log-level", "warn", "--max-warm", fmt.Sprint(perHost+4))
		clients[id] = c
	}
	ctx := context.Background()
	repo := e2eRepoAtB(b, filepath.Join(b.TempDir(), "repo"))
	type sess struct{ id, host string }
	var sessions []sess
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range ids {
		for i := range perHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var created httpapi.CreatedSession
				err := clients[h].Call(ctx, "POST", "/v1/sessions", map[string]any{"repo": repo, "agent": "stream", "host": h,
					"id": fmt.Sprintf("%s-%03d", h, i)}, &created)
				if err != nil {
					b.Errorf("create on %s: %v", h, err)
					return
				}
				mu.Lock()
				sessions = append(sessions, sess{created.ID, h})
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].id < sessions[j].id })
	// Every agent warm before the clock starts.
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		warm := 0
		for _, h := range ids {
			st, err := clients[h].Pool(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, be := range st.Backends {
				if be.State == pool.StateIdle {
					warm++
				}
			}
		}
		if warm >= len(sessions) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d agents warm after 5 minutes", warm, len(sessions))
		}
	}

	// Forwarded prompt against a prompt to the owner, on idle sessions.
	var direct, forwarded []time.Duration
	for i := range 40 {
		s := sessions[i*7%len(sessions)]
		other := ids[(indexOf(ids, s.host)+1)%len(ids)]
		for _, via := range []string{s.host, other} {
			start := time.Now()
			if _, err := clients[via].Prompt(ctx, s.id, "", "warm", false); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			waitIdle(b, clients[s.host], s.id)
			if via == s.host {
				direct = append(direct, d)
			} else {
				forwarded = append(forwarded, d)
			}
		}
	}
	dp, fp := median(direct), median(forwarded)
	b.ReportMetric(ms(dp), "prompt_owner_p50_ms")
	b.ReportMetric(ms(fp), "prompt_forwarded_p50_ms")
	b.ReportMetric(ms(fp-dp), "forward_extra_p50_ms")

	for it := 0; it < b.N; it++ {
		b.StopTimer()
		// Subscribers: session i of the first 100, read through the
		// next host, from its current end.
		var lat []time.Duration
		var latMu sync.Mutex
		var got atomic.Int64
		sctx, cancel := context.WithCancel(ctx)
		var subs sync.WaitGroup
		for i := range subscribers {
			s := sessions[i*len(sessions)/subscribers]
			via := clients[ids[(indexOf(ids, s.host)+1)%len(ids)]]
			evs, err := clients[s.host].EventLog(ctx, s.id, 0)
			if err != nil {
				b.Fatal(err)
			}
			from := evs[len(evs)-1].Seq
			subs.Add(1)
			go func() {
				defer subs.Done()
				var mine []time.Duration
				_ = via.Events(sctx, s.id, from, func(ev backends.Event) error {
					mine = append(mine, time.Since(ev.Time))
					got.Add(1)
					if ev.Type == backends.EventTurnEnded {
						return httpapi.ErrStop
					}
					return nil
				})
				latMu.Lock()
				lat = append(lat, mine...)
				latMu.Unlock()
			}()
		}
		time.Sleep(500 * time.Millisecond)
		before := 0
		for _, s := range sessions {
			evs, _ := clients[s.host].EventLog(ctx, s.id, 0)
			before += len(evs)
		}
		b.StartTimer()
		start := time.Now()
		var pw sync.WaitGroup
		var failed atomic.Int64
		for _, s := range sessions {
			pw.Add(1)
			go func() {
				defer pw.Done()
				t, err := clients[s.host].Prompt(ctx, s.id, "", "go", true)
				if err != nil || t.StopReason != "end_turn" {
					failed.Add(1)
				}
			}()
		}
		pw.Wait()
		wall := time.Since(start)
		b.StopTimer()
		subs.Wait()
		cancel()
		after := 0
		for _, s := range sessions {
			evs, _ := clients[s.host].EventLog(ctx, s.id, 0)
			after += len(evs)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(after-before)/wall.Seconds(), "events_per_s")
		b.ReportMetric(float64(len(sessions)-int(failed.Load())), "sessions_with_turn")
		if len(lat) > 0 {
			b.ReportMetric(ms(lat[len(lat)/2]), "delivery_p50_ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "delivery_p99_ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "delivery_max_ms")
		}
		b.ReportMetric(float64(got.Load()), "events_subscribed")
	}
}

// waitIdle waits until session runs no turn.
func waitIdle(b *testing.B, c *httpapi.Client, session string) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		s, err := c.Session(context.Background(), session)
		if err == nil && !s.Busy {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("session %s still busy: %v", session, err)
		}
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
