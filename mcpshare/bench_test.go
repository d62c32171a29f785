package mcpshare_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/mcpshare"
	"github.com/agentpool/agentpool/mcpshare/mcpsharetest"
)

// BenchmarkSharedMCP runs, in one go, sessions × servers stdio MCP
// servers (the fake server, allocating memory like a language runtime)
// as agents start them today, one copy per agent, then the same sessions
// given the daemon's shared copies, and reports the processes and
// resident memory of the servers either way, and the median latency of
// a tool call direct to a server (stdio) and through the daemon (http),
// with the difference: what sharing adds to a call. Run it with
// -benchtime 1x: each run measures the whole scenario.
//
//	go test -run '^$' -bench SharedMCP -benchtime 1x ./mcpshare/
func BenchmarkSharedMCP(b *testing.B) {
	sessions, servers, allocMB, calls := 20, 3, 24, 400
	if testing.Short() {
		sessions, allocMB, calls = 3, 2, 20
	}
	defs := make([]backends.MCPServer, servers)
	for i := range defs {
		defs[i] = mcpsharetest.Definition(b.TempDir(), fmt.Sprintf("srv%d", i), allocMB)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for range b.N {
		// Sharing off: every agent starts its own copy.
		var own []*mcp.ClientSession
		var pids []int
		for range sessions {
			for _, def := range defs {
				cmd := exec.Command(def.Command, def.Args...)
				for k, v := range def.Env {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
				if err != nil {
					b.Fatal(err)
				}
				own = append(own, cs)
				pids = append(pids, cmd.Process.Pid)
			}
		}
		offProcs, offRSS := treeOf(pids)
		direct := latencies(ctx, b, own[0], calls)
		for _, cs := range own {
			_ = cs.Close()
		}

		// Sharing on: the daemon's one copy per definition.
		m, err := mcpshare.New(mcpshare.Config{Dir: b.TempDir(), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		var shared []*mcp.ClientSession
		for s := range sessions {
			set := backends.MCPServers{}
			for i, def := range defs {
				set[fmt.Sprintf("srv%d", i)] = def
			}
			l, err := m.Attach(fmt.Sprintf("s-%d", s), "agent", set)
			if err != nil {
				b.Fatal(err)
			}
			for i := range defs {
				cs, err := connectB(ctx, l.URL(fmt.Sprintf("srv%d", i)), l.Token())
				if err != nil {
					b.Fatal(err)
				}
				shared = append(shared, cs)
			}
		}
		var onPIDs []int
		for _, st := range m.Stats() {
			onPIDs = append(onPIDs, st.PID)
		}
		onProcs, onRSS := treeOf(onPIDs)
		through := latencies(ctx, b, shared[0], calls)
		relayed := relayLatencies(ctx, b, m, defs[0], calls)
		relayRSS := relayProcessRSS(ctx, b, m, defs[0])
		concurrent := concurrentLatencies(ctx, b, shared, max(calls/10, 2))
		for _, cs := range shared {
			_ = cs.Close()
		}
		_ = m.Close()

		p50d, p50s := median(direct), median(through)
		b.ReportMetric(float64(offProcs), "procs-own")
		b.ReportMetric(float64(onProcs), "procs-shared")
		b.ReportMetric(float64(offRSS)/(1<<20), "MiB-own")
		b.ReportMetric(float64(onRSS)/(1<<20), "MiB-shared")
		b.ReportMetric(float64(p50s-p50d)/1e3, "µs-p50-added")
		b.ReportMetric(float64(median(relayed)-p50d)/1e3, "µs-p50-added-relay")
		b.ReportMetric(float64(relayRSS)/(1<<20), "MiB-per-relay")
		b.Logf("%d sessions × %d stdio servers (%d MiB each): own copies %d processes, %.0f MiB; shared %d processes, %.0f MiB (%.3f of the processes, %.3f of the memory)",
			sessions, servers, allocMB, offProcs, float64(offRSS)/(1<<20), onProcs, float64(onRSS)/(1<<20),
			float64(onProcs)/float64(max(offProcs, 1)), float64(onRSS)/float64(max(offRSS, 1)))
		b.Logf("an agent that takes stdio servers only runs a relay process per server instead: %.1f MiB each (the test binary; agentpool's is alike)", float64(relayRSS)/(1<<20))
		b.Logf("tool call p50: direct (stdio) %v, through the daemon (http) %v, added %v; through the stdio relay %v, added %v; with all %d agents calling at once, p50 %v",
			p50d, p50s, p50s-p50d, median(relayed), median(relayed)-p50d, len(shared), median(concurrent))
	}
}

var quiet = discardLogger()

// connectB is connect for a benchmark.
func connectB(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient(token)}, nil)
}

// latencies times n echo calls on cs, one after the other.
func latencies(ctx context.Context, b *testing.B, cs *mcp.ClientSession, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := call(ctx, cs, "echo", map[string]any{"text": "x"}); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// concurrentLatencies times n echo calls on every session at once.
func concurrentLatencies(ctx context.Context, b *testing.B, sessions []*mcp.ClientSession, n int) []time.Duration {
	var (
		mu  sync.Mutex
		all []time.Duration
		wg  sync.WaitGroup
	)
	for _, cs := range sessions {
		wg.Go(func() {
			l := latencies(ctx, b, cs, n)
			mu.Lock()
			all = append(all, l...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// treeOf counts the processes of the trees of pids and their RSS.
func treeOf(pids []int) (int, int64) {
	n, rss := 0, int64(0)
	for _, pid := range pids {
		n += len(mcpshare.Tree(pid))
		rss += mcpshare.TreeRSS(pid)
	}
	return n, rss
}

// relayLatencies times n echo calls of a stdio client through Relay (in
// this process, over pipes) to the shared def.
func relayLatencies(ctx context.Context, b *testing.B, m *mcpshare.Manager, def backends.MCPServer, n int) []time.Duration {
	l, err := m.Attach("s-relay", "agent", backends.MCPServers{"srv": def})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- mcpshare.Relay(ctx, l.URL("srv"), l.Token(), inR, outW); _ = outW.Close() }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-agent", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		b.Fatal(err)
	}
	out := latencies(ctx, b, cs, n)
	_ = cs.Close()
	<-done
	return out
}

// relayProcessRSS starts the relay as its own process (the test binary,
// see TestMain), makes one call through it, and returns its RSS.
func relayProcessRSS(ctx context.Context, b *testing.B, m *mcpshare.Manager, def backends.MCPServer) int64 {
	l, err := m.Attach("s-relay-proc", "agent", backends.MCPServers{"srv": def})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "mcp-relay", l.URL("srv"))
	cmd.Env = []string{"AGENTPOOL_MCP_TOKEN=" + l.Token()}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-agent", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	if _, err := call(ctx, cs, "echo", map[string]any{"text": "x"}); err != nil {
		b.Fatal(err)
	}
	return mcpshare.TreeRSS(cmd.Process.Pid)
}
