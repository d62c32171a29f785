package acp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
)

// The baselines of the benchmarks: a plain SDK client (no agentpool code)
// talking to the SDK's own agent in-process, to the scripted fake agent
// in-process, and to the fake agent as a separate process. Subtracting one
// from the next separates the fake agent's own cost, the process boundary
// and the backend's overhead.

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// reportLatency reports the median and 99th percentile of lat.
func reportLatency(b *testing.B, lat []time.Duration) {
	b.Helper()
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(us(percentile(lat, 50)), "p50-µs")
	b.ReportMetric(us(percentile(lat, 99)), "p99-µs")
}

// percentile sorts lat and returns its p-th percentile.
func percentile(lat []time.Duration, p int) time.Duration {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)*p/100]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// agentPipes are the two ends of an agent's stdio seen from the client.
type agentPipes struct {
	w    *os.File // the agent's stdin
	r    *os.File // the agent's stdout
	pid  int      // the agent's process, 0 when it runs in this one
	stop func()   // closes stdin and waits for the agent to end
}

// fakeProcess runs the scripted fake agent as a child process (the test
// binary re-executed), with no agentpool code on the client side.
func fakeProcess(b *testing.B, s agenttest.Script) agentPipes {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = agenttest.Env(agenttest.HelperACP, s)
	cmd.Stdin, cmd.Stdout = inR, outW
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	_ = inR.Close()
	_ = outW.Close()
	stop := func() {
		_ = inW.Close()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				b.Errorf("fake agent: %v", err)
			}
		case <-time.After(5 * time.Second):
			// Blocked writing to a client that stopped reading (a failed
			// benchmark): end it rather than hang.
			_ = cmd.Process.Kill()
			<-waited
			b.Errorf("fake agent still running 5s after its stdin closed; killed")
		}
		_ = outR.Close()
	}
	return agentPipes{w: inW, r: outR, pid: cmd.Process.Pid, stop: stop}
}

// fakeInProcess runs the scripted fake agent on a goroutine over os.Pipe.
func fakeInProcess(b *testing.B, s agenttest.Script) agentPipes {
	b.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := agenttest.Run(s, inR, outW, io.Discard)
		_ = outW.Close()
		done <- err
	}()
	stop := func() {
		_ = inW.Close()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("fake agent: %v", err)
			}
		case <-time.After(5 * time.Second):
			// Blocked writing to a client that stopped reading (a failed
			// benchmark): closing the read end fails its writes.
			_ = outR.Close()
			<-done
			b.Errorf("fake agent still running 5s after its stdin closed")
		}
		_ = inR.Close()
		_ = outR.Close()
	}
	return agentPipes{w: inW, r: outR, stop: stop}
}

// sdkAgentInProcess runs the SDK's own agent side (benchAgent) in-process.
func sdkAgentInProcess(b *testing.B, chunks int) agentPipes {
	b.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	ag := &benchAgent{chunks: chunks}
	ag.conn = acpsdk.NewAgentSideConnection(ag, outW, inR)
	ag.conn.SetLogger(quietLogger())
	stop := func() {
		_ = inW.Close()
		<-ag.conn.Done()
		_ = outW.Close()
		_ = inR.Close()
		_ = outR.Close()
	}
	return agentPipes{w: inW, r: outR, stop: stop}
}

// sdkClient is a plain SDK client on p, after initialize and session/new.
type sdkClient struct {
	conn *acpsdk.ClientSideConnection
	sid  acpsdk.SessionId
	cl   *benchClient
	p    agentPipes
}

// close ends the agent and waits for the connection to end.
func (c sdkClient) close() {
	c.p.stop()
	<-c.conn.Done()
}

// connectSDK connects a plain SDK client to p; the caller closes it.
func connectSDK(b *testing.B, p agentPipes) sdkClient {
	b.Helper()
	return connectSDKWith(b, p, &benchClient{}, os.TempDir())
}

// connectSDKWith is connectSDK with a given client and session cwd.
func connectSDKWith(b *testing.B, p agentPipes, cl *benchClient, cwd string) sdkClient {
	b.Helper()
	conn := acpsdk.NewClientSideConnection(cl, p.w, p.r)
	conn.SetLogger(quietLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := sdkClient{conn: conn, cl: cl, p: p}
	if _, err := conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber}); err != nil {
		c.close()
		b.Fatalf("initialize: %v", err)
	}
	ns, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{}})
	if err != nil {
		c.close()
		b.Fatalf("session/new: %v", err)
	}
	c.sid = ns.SessionId
	return c
}

// prompt runs one turn and returns the number of chunks it brought.
func (c sdkClient) prompt(b *testing.B) int64 {
	before := c.cl.chunks.Load()
	resp, err := c.conn.Prompt(context.Background(), acpsdk.PromptRequest{SessionId: c.sid, Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock("go")}})
	if err != nil {
		b.Fatal(err)
	}
	if resp.StopReason != acpsdk.StopReasonEndTurn {
		b.Fatalf("Prompt stop reason = %q; want end_turn", resp.StopReason)
	}
	return c.cl.chunks.Load() - before
}

// benchClient counts agent_message_chunk updates and serves fs reads from
// fs; it serves nothing else.
type benchClient struct {
	acpsdk.Client
	chunks atomic.Int64
	fs     acp.FileSystem
}

func (c *benchClient) ReadTextFile(ctx context.Context, p acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	text, err := c.fs.ReadTextFile(ctx, p.Path, p.Line, p.Limit)
	if err != nil {
		return acpsdk.ReadTextFileResponse{}, acpsdk.NewInternalError(map[string]any{"details": err.Error()})
	}
	return acpsdk.ReadTextFileResponse{Content: text}, nil
}

func (c *benchClient) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	if n.Update.AgentMessageChunk != nil {
		c.chunks.Add(1)
	}
	return nil
}

// benchAgent answers each prompt with chunks agent_message_chunk updates.
type benchAgent struct {
	acpsdk.Agent
	conn   *acpsdk.AgentSideConnection
	chunks int
}

func (a *benchAgent) Initialize(context.Context, acpsdk.InitializeRequest) (acpsdk.InitializeResponse, error) {
	return acpsdk.InitializeResponse{ProtocolVersion: acpsdk.ProtocolVersionNumber, AuthMethods: []acpsdk.AuthMethod{}}, nil
}

func (a *benchAgent) NewSession(context.Context, acpsdk.NewSessionRequest) (acpsdk.NewSessionResponse, error) {
	return acpsdk.NewSessionResponse{SessionId: "s1"}, nil
}

func (a *benchAgent) Prompt(ctx context.Context, p acpsdk.PromptRequest) (acpsdk.PromptResponse, error) {
	for i := 0; i < a.chunks; i++ {
		if err := a.conn.SessionUpdate(ctx, acpsdk.SessionNotification{SessionId: p.SessionId, Update: acpsdk.UpdateAgentMessageText("c")}); err != nil {
			return acpsdk.PromptResponse{}, err
		}
	}
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
}

func (a *benchAgent) Cancel(context.Context, acpsdk.CancelNotification) error { return nil }

// rawClient speaks to an agent with hand-written lines and only counts the
// session/update lines it gets back: the agent's own emission rate.
type rawClient struct {
	w   io.Writer
	r   *bufio.Reader
	pid int
	sid string
	id  int
	// serve, if set, returns the whole answer line to an agent's request.
	serve func(id json.RawMessage, method string) []byte
}

func connectRaw(b *testing.B, p agentPipes) *rawClient {
	b.Helper()
	b.Cleanup(p.stop)
	c := &rawClient{w: p.w, r: bufio.NewReaderSize(p.r, 64<<10), pid: p.pid}
	c.call(b, "initialize", map[string]any{"protocolVersion": 1})
	res := c.call(b, "session/new", map[string]any{"cwd": os.TempDir(), "mcpServers": []any{}})
	var ns struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &ns); err != nil || ns.SessionID == "" {
		b.Fatalf("session/new answer %s: %v", res, err)
	}
	c.sid = ns.SessionID
	return c
}

// call sends a request and reads up to its answer, counting the
// session/update lines on the way.
func (c *rawClient) call(b *testing.B, method string, params any) json.RawMessage {
	res, _ := c.callCount(b, method, params)
	return res
}

func (c *rawClient) callCount(b *testing.B, method string, params any) (json.RawMessage, int) {
	c.id++
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.w.Write(append(line, '\n')); err != nil {
		b.Fatal(err)
	}
	want := strconv.Itoa(c.id)
	updates := 0
	for {
		l, err := c.r.ReadSlice('\n')
		if err != nil {
			b.Fatalf("read from agent: %v", err)
		}
		if bytes.Contains(l, []byte(`"method":"session/update"`)) {
			updates++
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			b.Fatalf("agent line %s: %v", l, err)
		}
		switch {
		case m.Method != "" && len(m.ID) > 0:
			if c.serve == nil {
				b.Fatalf("unexpected request from the agent: %s", l)
			}
			if _, err := c.w.Write(c.serve(m.ID, m.Method)); err != nil {
				b.Fatal(err)
			}
		case m.Method == "" && string(m.ID) == want:
			if m.Error != nil {
				b.Fatalf("%s answer %s", method, l)
			}
			return m.Result, updates
		}
	}
}

// prompt runs one turn and returns the number of updates before the answer.
func (c *rawClient) prompt(b *testing.B) int64 {
	_, n := c.callCount(b, "session/prompt", map[string]any{"sessionId": c.sid, "prompt": []any{map[string]any{"type": "text", "text": "go"}}})
	return int64(n)
}
