package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/pool"
)

// errSeen stops an event stream once the reader has what it came for.
var errSeen = errors.New("seen")

// BenchmarkBigUpdates runs the real daemon through a flood of big updates:
// two sessions whose agent sends 300 updates of 1 MiB each (a turn each),
// a reader following the first from its first event, then a reader
// replaying the second (all from the store), while a bystander session
// prompts a quick agent again and again. The daemon's RSS
// (/proc/PID/status VmRSS) is sampled every 100 ms. It reports the idle
// RSS, the peak, peak−idle and the bystander's prompt p50/p99 (prompts
// that wait for their turn's end).
//
//	go test -run '^$' -bench BigUpdates -benchtime 1x ./cmd/agentpool
func BenchmarkBigUpdates(b *testing.B) {
	const size = 1 << 20
	updates := 300
	if testing.Short() {
		updates = 30 // make bench-smoke: the same path, once and small
	}
	bin := agentpoolBinary(b)
	for range b.N {
		home := b.TempDir()
		steps := make([]agenttest.Step, updates)
		for i := range steps {
			steps[i] = agenttest.Step{BigLine: size}
		}
		writeBenchProviders(b, home, map[string]agenttest.Script{
			"flood": {Turns: []agenttest.Turn{{Steps: steps}}},
			"quick": {Turns: []agenttest.Turn{{Echo: true}}},
		})
		repo := benchRepo(b)
		pid, client, stop := startBenchDaemon(b, bin, home)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		create := func(agent string) string {
			s, err := client.CreateSession(ctx, pool.CreateRequest{Repo: repo, Agent: agent})
			if err != nil {
				b.Fatalf("create session: %v", err)
			}
			return s.ID
		}
		floods := []string{create("flood"), create("flood")}
		bystander := create("quick")
		if _, err := client.Prompt(ctx, bystander, "", "warm up", true); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second)
		idle := vmRSS(b, pid)
		stopSampler := sampleRSS(b, pid)

		var wg sync.WaitGroup
		done := make(chan struct{})
		var lat []time.Duration
		var prompts []bystanderPrompt
		wg.Add(1)
		go func() { // the bystander prompts until the floods are read
			defer wg.Done()
			prompts = promptUntil(ctx, b, client, bystander, done, 50*time.Millisecond)
			for _, p := range prompts {
				lat = append(lat, p.answered.Sub(p.sent))
			}
		}()
		// readAll reads session id from its first event until its flood's
		// turn.ended, and returns the updates of size bytes or more.
		readAll := func(id string) int {
			n := 0
			err := client.Events(ctx, id, 0, func(ev backends.Event) error {
				if len(ev.Data) >= size {
					n++
				}
				if ev.Type == backends.EventTurnEnded {
					return errSeen
				}
				return nil
			})
			if !errors.Is(err, errSeen) {
				b.Errorf("events of %s: %v after %d big updates", id, err, n)
			}
			return n
		}
		var wf sync.WaitGroup
		wf.Add(1)
		go func() {
			defer wf.Done()
			if n := readAll(floods[0]); n != updates {
				b.Errorf("follower read %d big updates; want %d", n, updates)
			}
		}()
		for _, id := range floods {
			wf.Add(1)
			go func() {
				defer wf.Done()
				if _, err := client.Prompt(ctx, id, "", "flood", true); err != nil {
					b.Errorf("flood prompt: %v", err)
				}
			}()
		}
		wf.Wait()
		if n := readAll(floods[1]); n != updates {
			b.Errorf("replay read %d big updates; want %d", n, updates)
		}
		close(done)
		wg.Wait()
		peak := slices.Max(append(stopSampler(), idle))
		reportTurnBreakdown(ctx, b, client, bystander, prompts)
		cancel()
		stop()
		if len(lat) == 0 {
			b.Fatal("no bystander prompt completed")
		}
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
		const mib = 1 << 20
		b.ReportMetric(float64(idle)/mib, "idle-MiB")
		b.ReportMetric(float64(peak)/mib, "peak-MiB")
		b.ReportMetric(float64(peak-idle)/mib, "growth-MiB")
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "max-ms")
		b.Logf("RSS idle %.0f MiB, peak %.0f MiB (+%.0f); bystander %d prompts p50 %.1f ms p99 %.1f ms max %.1f ms",
			float64(idle)/mib, float64(peak)/mib, float64(peak-idle)/mib, len(lat), q(0.5), q(0.99),
			float64(lat[len(lat)-1])/float64(time.Millisecond))
	}
}

// vmRSS returns the resident set of process pid, in bytes.
func vmRSS(tb testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no VmRSS for process %d", pid)
	return 0
}

// sampleRSS samples the RSS of pid every 100 ms until stop, which returns
// the samples.
func sampleRSS(tb testing.TB, pid int) (stop func() []int64) {
	quit, out := make(chan struct{}), make(chan []int64)
	go func() {
		var got []int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				out <- got
				return
			case <-t.C:
				got = append(got, vmRSS(tb, pid))
			}
		}
	}()
	return func() []int64 { close(quit); return <-out }
}

// writeBenchProviders writes home's providers.json: one ACP provider per
// script, the test binary as the scripted agent.
func writeBenchProviders(tb testing.TB, home string, scripts map[string]agenttest.Script) {
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	provs := map[string]any{}
	for id, s := range scripts {
		raw, err := json.Marshal(s)
		if err != nil {
			tb.Fatal(err)
		}
		provs[id] = map[string]any{"extends": "acp", "command": []string{exe}, "env": map[string]string{
			agenttest.EnvHelper: agenttest.HelperACP, agenttest.EnvScript: string(raw),
			"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}}
	}
	b, _ := json.MarshalIndent(map[string]any{"version": 1, "providers": provs}, "", "  ")
	if err := os.WriteFile(filepath.Join(home, providersFile), b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// benchRepo makes a git repository with one commit.
func benchRepo(tb testing.TB) string {
	dir := filepath.Join(tb.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# r\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// startBenchDaemon starts `agentpool serve` on home and returns its pid,
// a client, and the function that stops it (SIGTERM, then wait).
func startBenchDaemon(tb testing.TB, bin, home string, args ...string) (int, *httpapi.Client, func()) {
	return startBenchDaemonEnv(tb, bin, home, nil, args...)
}

// startBenchDaemonEnv is startBenchDaemon with env added to the daemon's
// environment.
func startBenchDaemonEnv(tb testing.TB, bin, home string, env []string, args ...string) (int, *httpapi.Client, func()) {
	_ = os.Remove(filepath.Join(home, daemonFileName))
	out := &bytes.Buffer{}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "AGENTPOOL_HOME="+home, "XDG_STATE_HOME="+tb.TempDir()), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		removeCgroupTree(home)
	}
	tb.Cleanup(stop)
	deadline := time.Now().Add(20 * time.Second)
	var info daemonInfo
	for {
		b, err := os.ReadFile(filepath.Join(home, daemonFileName))
		if err == nil && json.Unmarshal(b, &info) == nil && info.PID == cmd.Process.Pid {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("daemon did not start:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, err := os.ReadFile(filepath.Join(home, tokenFileName))
	if err != nil {
		tb.Fatal(err)
	}
	return cmd.Process.Pid, &httpapi.Client{BaseURL: "http://" + info.Addr, Token: strings.TrimSpace(string(token))}, stop
}

// bystanderPrompt is one prompt the bystander sent and waited for, as its
// client saw it.
type bystanderPrompt struct {
	turn           int64
	sent, answered time.Time
}

// promptUntil prompts session through client again and again, each prompt
// waiting for its turn's end, pausing pause between them, until stop is
// closed or a prompt fails; it returns the turns.
func promptUntil(ctx context.Context, tb testing.TB, client *httpapi.Client, session string, stop <-chan struct{}, pause time.Duration) []bystanderPrompt {
	var prompts []bystanderPrompt
	for {
		select {
		case <-stop:
			return prompts
		default:
		}
		start := time.Now()
		t, err := client.Prompt(ctx, session, "", "hello", true)
		if err != nil {
			tb.Errorf("bystander prompt: %v", err)
			return prompts
		}
		prompts = append(prompts, bystanderPrompt{turn: t.ID, sent: start, answered: time.Now()})
		time.Sleep(pause)
	}
}

// reportTurnBreakdown splits each of prompts' time, with the times the
// daemon stamped on the session's events, into four parts:
//
//   - start: request sent → turn.started (the request, the checkpoint
//     before the turn, its row stored);
//   - agent: turn.started → the first message.chunk (the prompt to the
//     agent, its answer read);
//   - end: first chunk → turn.ended (the agent's end of the turn, the
//     checkpoint after it);
//   - answer: turn.ended → answer received (the end's row and event
//     committed, the response).
//
// It reports each part's p99 and logs the parts of the slowest prompts.
func reportTurnBreakdown(ctx context.Context, b *testing.B, client *httpapi.Client, session string, prompts []bystanderPrompt) {
	byTurn := map[int64]*turnStamps{}
	last := int64(0)
	for _, p := range prompts {
		byTurn[p.turn] = &turnStamps{}
		last = max(last, p.turn)
	}
	err := client.Events(ctx, session, 0, func(ev backends.Event) error {
		if noteTurnStamp(byTurn, ev) && ev.Turn == last {
			return errSeen
		}
		return nil
	})
	if !errors.Is(err, errSeen) {
		b.Errorf("events of the bystander: %v", err)
		return
	}
	rows := splitTurns(prompts, byTurn)
	if len(rows) == 0 {
		b.Error("no bystander turn has its events")
		return
	}
	for i, d := range partsP99(rows) {
		b.ReportMetric(msOf(d), turnPartNames[i]+"-p99-ms")
	}
	for _, r := range slowestTurns(rows, 5) {
		b.Logf("slow prompt %s", r)
	}
}

// turnStamps are the times of a turn's events that split it into parts.
type turnStamps struct{ started, chunk, ended time.Time }

// turnPartNames name the parts of a turn (see reportTurnBreakdown).
var turnPartNames = []string{"start", "agent", "end", "answer"}

// noteTurnStamp notes ev's time in its turn's stamps, when byTurn has the
// turn; it reports whether ev ended it.
func noteTurnStamp(byTurn map[int64]*turnStamps, ev backends.Event) bool {
	st := byTurn[ev.Turn]
	if st == nil {
		return false
	}
	switch {
	case ev.Type == backends.EventTurnStarted:
		st.started = ev.Time
	case ev.Type == backends.EventMessageChunk && st.chunk.IsZero():
		st.chunk = ev.Time
	case ev.Type == backends.EventTurnEnded:
		st.ended = ev.Time
		return true
	}
	return false
}

// turnSplit is one prompt's time, whole and in parts.
type turnSplit struct {
	total time.Duration
	parts []time.Duration
}

func (r turnSplit) String() string {
	return fmt.Sprintf("%.1f ms: start %.1f, agent %.1f, end %.1f, answer %.1f", msOf(r.total),
		msOf(r.parts[0]), msOf(r.parts[1]), msOf(r.parts[2]), msOf(r.parts[3]))
}

// splitTurns splits each prompt whose turn has all its stamps.
func splitTurns(prompts []bystanderPrompt, byTurn map[int64]*turnStamps) []turnSplit {
	var rows []turnSplit
	for _, p := range prompts {
		st := byTurn[p.turn]
		if st == nil || st.started.IsZero() || st.chunk.IsZero() || st.ended.IsZero() {
			continue
		}
		rows = append(rows, turnSplit{total: p.answered.Sub(p.sent), parts: []time.Duration{
			st.started.Sub(p.sent), st.chunk.Sub(st.started), st.ended.Sub(st.chunk), p.answered.Sub(st.ended)}})
	}
	return rows
}

// partsP99 returns the p99 of each part over rows.
func partsP99(rows []turnSplit) []time.Duration { return partsQ(rows, 0.99) }

// partsQ returns the q quantile of each part over rows.
func partsQ(rows []turnSplit, q float64) []time.Duration {
	out := make([]time.Duration, len(turnPartNames))
	for i := range out {
		ds := make([]time.Duration, 0, len(rows))
		for _, r := range rows {
			ds = append(ds, r.parts[i])
		}
		slices.Sort(ds)
		out[i] = ds[int(q*float64(len(ds)-1))]
	}
	return out
}

// slowestTurns returns the n slowest of rows, slowest first.
func slowestTurns(rows []turnSplit, n int) []turnSplit {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(x, y turnSplit) int { return int(y.total - x.total) })
	return rows[:min(n, len(rows))]
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
