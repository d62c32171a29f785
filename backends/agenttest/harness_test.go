package agenttest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends/agenttest"
)

// runTurn runs the scripted agent in this process, opens a session in cwd,
// sends one prompt and returns the texts of the agent_message_chunks sent
// before the prompt's answer.
func runTurn(t *testing.T, cwd string, steps ...agenttest.Step) []string {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: steps}}}
	go func() {
		err := agenttest.Run(s, inR, outW, io.Discard)
		outW.Close()
		done <- err
	}()
	out := bufio.NewScanner(outR)
	out.Buffer(nil, 1<<20)
	call := func(id int, method string, params any) []string {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := inW.Write(append(b, '\n')); err != nil {
			t.Fatalf("write %s: %v", method, err)
		}
		var chunks []string
		for out.Scan() {
			var m struct {
				ID     *int `json:"id"`
				Params struct {
					Update struct {
						SessionUpdate string `json:"sessionUpdate"`
						Content       struct {
							Text string `json:"text"`
						} `json:"content"`
					} `json:"update"`
				} `json:"params"`
			}
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatalf("agent line %q: %v", out.Text(), err)
			}
			if m.ID != nil && *m.ID == id {
				return chunks
			}
			if m.Params.Update.SessionUpdate == "agent_message_chunk" {
				chunks = append(chunks, m.Params.Update.Content.Text)
			}
		}
		t.Fatalf("%s: agent output ended: %v", method, out.Err())
		return nil
	}
	call(1, "initialize", map[string]any{"protocolVersion": 1})
	call(2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})
	chunks := call(3, "session/prompt", map[string]any{"sessionId": "x", "prompt": []any{map[string]any{"type": "text", "text": "go"}}})
	inW.Close()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if err := <-done; err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	return chunks
}

// sysResults runs steps in one turn and parses every chunk as a Sys result.
func sysResults(t *testing.T, cwd string, steps ...agenttest.Step) []agenttest.SysResult {
	t.Helper()
	var out []agenttest.SysResult
	for _, text := range runTurn(t, cwd, steps...) {
		r, ok := agenttest.ParseSysResult(text)
		if !ok {
			t.Fatalf("ParseSysResult(%q) = false; want a Sys result", text)
		}
		out = append(out, r)
	}
	if len(out) != len(steps) {
		t.Fatalf("got %d results for %d steps: %v", len(out), len(steps), out)
	}
	return out
}

// helperCmd returns a command running the test binary as helper name.
func helperCmd(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), agenttest.HelperEnv(name)...)
	if os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps a second before exiting 0.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	return cmd
}

// reap kills the processes of e in cleanup and checks that they are gone.
func reap(t *testing.T, es ...agenttest.PidEntry) {
	t.Helper()
	t.Cleanup(func() {
		for _, e := range es {
			if err := agenttest.Kill(e, 10*time.Second); err != nil {
				t.Errorf("Kill(%v) error = %v", e, err)
			}
			if agenttest.Alive(e) {
				t.Errorf("process %v alive after Kill", e)
			}
		}
	})
}

// reapPidFile reaps every process listed in pidfile at cleanup time.
func reapPidFile(t *testing.T, pidfile string) {
	t.Helper()
	t.Cleanup(func() {
		es, err := agenttest.ReadPidFile(pidfile)
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("ReadPidFile(%q) error = %v", pidfile, err)
		}
		for _, e := range es {
			if err := agenttest.Kill(e, 10*time.Second); err != nil {
				t.Errorf("Kill(%v) error = %v", e, err)
			}
			if agenttest.Alive(e) {
				t.Errorf("process %v alive after Kill", e)
			}
		}
	})
}

// checkSessionLeader checks that e is alive and leads a session other than
// this process's.
func checkSessionLeader(t *testing.T, e agenttest.PidEntry) agenttest.ProcStat {
	t.Helper()
	if !agenttest.Alive(e) {
		t.Fatalf("Alive(%v) = false; want true", e)
	}
	st, err := agenttest.ReadProcStat(e.Pid)
	if err != nil {
		t.Fatalf("ReadProcStat(%d) error = %v", e.Pid, err)
	}
	self, err := agenttest.ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatalf("ReadProcStat(self) error = %v", err)
	}
	if st.SID != e.Pid || st.SID == self.SID {
		t.Errorf("process %d: session %d (test's %d); want a session of its own", e.Pid, st.SID, self.SID)
	}
	return st
}

func oneEntry(t *testing.T, pidfile string) agenttest.PidEntry {
	t.Helper()
	es, err := agenttest.ReadPidFile(pidfile)
	if err != nil || len(es) != 1 {
		t.Fatalf("ReadPidFile(%q) = %v, %v; want one entry", pidfile, es, err)
	}
	return es[0]
}
