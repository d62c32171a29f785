package acp_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

func benchBackend(b *testing.B, s agenttest.Script) *acp.Backend {
	b.Helper()
	spec := agenttest.Spec("bench", s)
	spec.Dir = b.TempDir()
	be, err := acp.New(acp.Config{Spec: spec, StopGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := be.Start(context.Background(), ""); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Stop(context.Background()) })
	return be
}

// BenchmarkPromptWarm: one turn with one chunk back on a warm backend
// (a separate agent process), beside the same turn over an in-process SDK
// client/agent pair on raw pipes. The difference is agentpool's overhead
// plus the cost of a real process boundary.
func BenchmarkPromptWarm(b *testing.B) {
	b.Run("backend", func(b *testing.B) {
		be := benchBackend(b, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunk: "x"}}}}})
		n := 0
		emit := func(backends.Event) { n++ }
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := be.Prompt(context.Background(), backends.Prompt{Text: "hi"}, emit); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		if n != b.N {
			b.Fatalf("got %d chunks for %d turns", n, b.N)
		}
		reportP50(b, lat)
	})
	b.Run("sdk-inprocess", func(b *testing.B) {
		client, sid, stop := sdkPair(b)
		defer stop()
		b.ResetTimer()
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := client.conn.Prompt(context.Background(), acpsdk.PromptRequest{SessionId: sid, Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock("hi")}}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		if client.chunks != b.N {
			b.Fatalf("got %d chunks for %d turns", client.chunks, b.N)
		}
		reportP50(b, lat)
	})
}

func reportP50(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkStartCold: spawn + initialize + session/new of the fake agent, and stop.
func BenchmarkStartCold(b *testing.B) {
	spec := agenttest.Spec("bench", agenttest.Script{})
	spec.Dir = b.TempDir()
	for i := 0; i < b.N; i++ {
		be, err := acp.New(acp.Config{Spec: spec})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := be.Start(context.Background(), ""); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = be.Stop(context.Background())
		b.StartTimer()
	}
}

// BenchmarkChunkThroughput: 10 000 agent_message_chunk updates through to
// Events in one turn; reports updates/s.
func BenchmarkChunkThroughput(b *testing.B) {
	const chunks = 10000
	be := benchBackend(b, agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{{Chunks: chunks}}}}})
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		if _, err := be.Prompt(context.Background(), backends.Prompt{Text: "go"}, func(backends.Event) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n != chunks*b.N {
		b.Fatalf("delivered %d events; want %d", n, chunks*b.N)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "updates/s")
}

// sdk pair: the baseline.

type benchClient struct {
	acpsdk.Client
	conn   *acpsdk.ClientSideConnection
	chunks int
}

func (c *benchClient) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	if n.Update.AgentMessageChunk != nil {
		c.chunks++
	}
	return nil
}

type benchAgent struct {
	acpsdk.Agent
	conn *acpsdk.AgentSideConnection
}

func (a *benchAgent) Initialize(context.Context, acpsdk.InitializeRequest) (acpsdk.InitializeResponse, error) {
	return acpsdk.InitializeResponse{ProtocolVersion: acpsdk.ProtocolVersionNumber, AuthMethods: []acpsdk.AuthMethod{}}, nil
}

func (a *benchAgent) NewSession(context.Context, acpsdk.NewSessionRequest) (acpsdk.NewSessionResponse, error) {
	return acpsdk.NewSessionResponse{SessionId: "s1"}, nil
}

func (a *benchAgent) Prompt(ctx context.Context, p acpsdk.PromptRequest) (acpsdk.PromptResponse, error) {
	if err := a.conn.SessionUpdate(ctx, acpsdk.SessionNotification{SessionId: p.SessionId, Update: acpsdk.UpdateAgentMessageText("x")}); err != nil {
		return acpsdk.PromptResponse{}, err
	}
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
}

func (a *benchAgent) Cancel(context.Context, acpsdk.CancelNotification) error { return nil }

func sdkPair(b *testing.B) (*benchClient, acpsdk.SessionId, func()) {
	b.Helper()
	c2aR, c2aW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	a2cR, a2cW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	ag := &benchAgent{}
	ag.conn = acpsdk.NewAgentSideConnection(ag, a2cW, c2aR)
	cl := &benchClient{}
	cl.conn = acpsdk.NewClientSideConnection(cl, c2aW, a2cR)
	ctx := context.Background()
	if _, err := cl.conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber}); err != nil {
		b.Fatal(err)
	}
	ns, err := cl.conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: "/", McpServers: []acpsdk.McpServer{}})
	if err != nil {
		b.Fatal(err)
	}
	stop := func() {
		_ = c2aW.Close()
		_ = a2cW.Close()
		<-cl.conn.Done()
		<-ag.conn.Done()
		_ = c2aR.Close()
		_ = a2cR.Close()
	}
	return cl, ns.SessionId, stop
}
