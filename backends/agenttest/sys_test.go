package agenttest_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentpool/agentpool/backends/agenttest"
)

func TestSysResultRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		text string
		want agenttest.SysResult
	}{
		{"sys write ok", agenttest.SysResult{Op: "write", Status: "ok", Exit: -1}},
		{"sys write EACCES open /x: permission denied", agenttest.SysResult{Op: "write", Status: "EACCES", Detail: "open /x: permission denied", Exit: -1}},
		{"sys read ok  two\nlines ", agenttest.SysResult{Op: "read", Status: "ok", Detail: " two\nlines ", Data: " two\nlines ", Exit: -1}},
		{"sys connect error dial tcp: i/o timeout", agenttest.SysResult{Op: "connect", Status: "error", Detail: "dial tcp: i/o timeout", Exit: -1}},
		{"sys exec ok exit=128 fatal: no", agenttest.SysResult{Op: "exec", Status: "ok", Detail: "exit=128 fatal: no", Exit: 128, Data: "fatal: no"}},
		{"sys exec ok exit=0", agenttest.SysResult{Op: "exec", Status: "ok", Detail: "exit=0", Exit: 0}},
		{"sys talk ok HTTP/1.1 403 Forbidden\r\n", agenttest.SysResult{Op: "talk", Status: "ok", Detail: "HTTP/1.1 403 Forbidden\r\n", Data: "HTTP/1.1 403 Forbidden\r\n", Exit: -1}},
		{"sys daemon ok pid=42 start=7", agenttest.SysResult{Op: "daemon", Status: "ok", Detail: "pid=42 start=7", Exit: -1, Proc: agenttest.PidEntry{Pid: 42, StartTime: 7}}},
		{"sys setsid_child ENOENT fork/exec x", agenttest.SysResult{Op: "setsid_child", Status: "ENOENT", Detail: "fork/exec x", Exit: -1}},
	} {
		got, ok := agenttest.ParseSysResult(tt.text)
		if !ok {
			t.Errorf("ParseSysResult(%q) = false; want true", tt.text)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseSysResult(%q) mismatch (-want +got):\n%s", tt.text, diff)
		}
		if s := got.String(); s != tt.text {
			t.Errorf("ParseSysResult(%q).String() = %q; want the text back", tt.text, s)
		}
	}
	for _, text := range []string{"", "sys", "sys write", "echo: sys write ok", "sys  ok", "sys exec ok 3", "sys daemon ok pid=x start=1", "sys wr/te ok"} {
		if r, ok := agenttest.ParseSysResult(text); ok {
			t.Errorf("ParseSysResult(%q) = %+v, true; want false", text, r)
		}
	}
}

func TestSysFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	long := strings.Repeat("0123456789", 10)
	sys := func(op agenttest.SysOp) agenttest.Step { return agenttest.Step{Sys: &op} }
	got := sysResults(t, dir,
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: p, Content: long}),
		sys(agenttest.SysOp{Op: agenttest.OpRead, Path: p}),
		sys(agenttest.SysOp{Op: agenttest.OpMkdir, Path: filepath.Join(dir, "d")}),
		sys(agenttest.SysOp{Op: agenttest.OpMkdir, Path: filepath.Join(dir, "d")}),
		sys(agenttest.SysOp{Op: agenttest.OpRename, Path: p, To: filepath.Join(dir, "d", "g.txt")}),
		sys(agenttest.SysOp{Op: agenttest.OpRead, Path: p}),
		sys(agenttest.SysOp{Op: agenttest.OpRemove, Path: filepath.Join(dir, "d")}),
		sys(agenttest.SysOp{Op: agenttest.OpWrite, Path: filepath.Join(dir, "d", "g.txt", "h")}),
		sys(agenttest.SysOp{Op: "chmod"}),
	)
	want := []struct{ op, status, data string }{
		{"write", "ok", ""},
		{"read", "ok", long[:64]},
		{"mkdir", "ok", ""},
		{"mkdir", "EEXIST", ""},
		{"rename", "ok", ""},
		{"read", "ENOENT", ""},
		{"remove", "ENOTEMPTY", ""},
		{"write", "ENOTDIR", ""},
		{"chmod", "error", ""},
	}
	for i, w := range want {
		if got[i].Op != w.op || got[i].Status != w.status || got[i].Data != w.data {
			t.Errorf("step %d: result %q; want op %s status %s data %q", i, got[i], w.op, w.status, w.data)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "d", "g.txt")); err != nil || string(b) != long {
		t.Errorf("ReadFile(g.txt) = %q, %v; want what write wrote", b, err)
	}
}

func TestSysConnect(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	got := sysResults(t, t.TempDir(),
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpConnect, Addr: l.Addr().String()}},
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpConnect, Addr: closedAddr}},
	)
	if !got[0].OK() {
		t.Errorf("connect %s: %q; want ok", l.Addr(), got[0])
	}
	if got[1].Status != "ECONNREFUSED" {
		t.Errorf("connect %s: %q; want ECONNREFUSED", closedAddr, got[1])
	}
}

// TestSysTalk: connect dials unix sockets too (a path, or "@name" for an
// abstract one); talk sends its content and reports the answer, here a
// greeter helper's.
func TestSysTalk(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	abstract := "@agenttest-" + filepath.Base(dir)
	al, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ready := filepath.Join(dir, "ready")
	greeter := helperCmd(t, agenttest.HelperGreeter, addr, "hello\n", ready)
	if err := greeter.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = greeter.Process.Kill(); _ = greeter.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the greeter never listened")
		}
	}
	got := sysResults(t, dir,
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpConnect, Network: "unix", Addr: sock}},
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpConnect, Network: "unix", Addr: abstract}},
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpConnect, Network: "unix", Addr: filepath.Join(dir, "missing.sock")}},
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpTalk, Addr: addr, Content: "hi\n"}},
	)
	want := []struct{ status, data string }{{"ok", ""}, {"ok", ""}, {"ENOENT", ""}, {"ok", "hello\n"}}
	for i, w := range want {
		if got[i].Status != w.status || got[i].Data != w.data {
			t.Errorf("step %d: %q; want status %s, data %q", i, got[i], w.status, w.data)
		}
	}
}

func TestSysExec(t *testing.T) {
	dir := t.TempDir()
	got := sysResults(t, dir,
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"sh", "-c", "pwd; echo oops >&2; exit 3"}, Dir: dir}},
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{filepath.Join(dir, "missing")}}},
		agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpExec, Argv: []string{"sh", "-c", "head -c 1000 /dev/zero | tr '\\0' x"}}},
	)
	if r := got[0]; !r.OK() || r.Exit != 3 || r.Data != dir+"\noops\n" {
		t.Errorf("exec sh: %+v; want ok, exit 3, output %q", r, dir+"\noops\n")
	}
	if r := got[1]; r.Status != "ENOENT" {
		t.Errorf("exec missing: %q; want ENOENT", r)
	}
	if r := got[2]; r.Exit != 0 || r.Data != strings.Repeat("x", 256) {
		t.Errorf("exec flood: exit %d, %d bytes of output; want exit 0, 256 bytes", r.Exit, len(r.Data))
	}
}

func TestSysSetsidChildInTurn(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pids")
	reapPidFile(t, pidfile)
	got := sysResults(t, dir, agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpSetsidChild, Path: pidfile}})
	if !got[0].OK() {
		t.Fatalf("setsid_child: %q; want ok", got[0])
	}
	e := oneEntry(t, pidfile)
	if got[0].Proc != e {
		t.Errorf("setsid_child reported %v; pid file has %v", got[0].Proc, e)
	}
	st := checkSessionLeader(t, e)
	if st.PPid != os.Getpid() {
		t.Errorf("setsid child's parent = %d; want the agent, %d", st.PPid, os.Getpid())
	}
}

func TestSysDaemonInTurn(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pids")
	reapPidFile(t, pidfile)
	got := sysResults(t, dir, agenttest.Step{Sys: &agenttest.SysOp{Op: agenttest.OpDaemon, Path: pidfile}})
	if !got[0].OK() {
		t.Fatalf("daemon: %q; want ok", got[0])
	}
	e := oneEntry(t, pidfile)
	if got[0].Proc != e {
		t.Errorf("daemon reported %v; pid file has %v", got[0].Proc, e)
	}
	if st := checkSessionLeader(t, e); st.PPid == os.Getpid() {
		t.Errorf("daemon's parent is the agent (%d); want it reparented", st.PPid)
	}
}

// TestStartStepsPlantChild runs the agent as a separate process whose
// StartSteps plant a setsid child before it reads stdin (here /dev/null,
// so the agent ends at once), with a pid file relative to its directory.
func TestStartStepsPlantChild(t *testing.T) {
	dir := t.TempDir()
	reapPidFile(t, filepath.Join(dir, "pids"))
	s := agenttest.Script{StartSteps: []agenttest.Step{
		{Sys: &agenttest.SysOp{Op: agenttest.OpSetsidChild, Path: "pids"}},
		{Sys: &agenttest.SysOp{Op: agenttest.OpDaemon, Path: "pids"}},
	}}
	cmd := helperCmd(t, agenttest.HelperACP)
	cmd.Env = append(agenttest.Env(agenttest.HelperACP, s), "GORACE=atexit_sleep_ms=0")
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || len(out) != 0 {
		t.Fatalf("agent: stdout %q, error %v; want nothing, nil; stderr:\n%s", out, err, stderr.String())
	}
	es, err := agenttest.ReadPidFile(filepath.Join(dir, "pids"))
	if err != nil || len(es) != 2 {
		t.Fatalf("ReadPidFile = %v, %v; want two entries; stderr:\n%s", es, err, stderr.String())
	}
	for _, e := range es {
		checkSessionLeader(t, e)
		if !strings.Contains(stderr.String(), "ok pid="+strings.Fields(e.String())[0]+" ") {
			t.Errorf("agent stderr does not report pid %d:\n%s", e.Pid, stderr.String())
		}
	}
}

// TestHelperDaemonize runs HelperDaemonize as a plain command, the way a
// terminal would, and finds its orphan alive in a session of its own.
func TestHelperDaemonize(t *testing.T) {
	dir := t.TempDir()
	reapPidFile(t, filepath.Join(dir, "pids"))
	cmd := helperCmd(t, agenttest.HelperDaemonize, "pids")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("daemonize: %v", err)
	}
	e := oneEntry(t, filepath.Join(dir, "pids"))
	if got := strings.TrimSpace(string(out)); got != e.String() {
		t.Errorf("daemonize printed %q; want %q", got, e.String())
	}
	st := checkSessionLeader(t, e)
	if st.PPid == cmd.Process.Pid {
		t.Errorf("orphan's parent is still the exited daemonizer %d", st.PPid)
	}
}

func TestKillAndAlive(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pids")
	cmd := helperCmd(t, agenttest.HelperDaemonize, pidfile)
	if err := cmd.Run(); err != nil {
		t.Fatalf("daemonize: %v", err)
	}
	e := oneEntry(t, pidfile)
	reap(t, e)
	recycled := agenttest.PidEntry{Pid: e.Pid, StartTime: e.StartTime + 1}
	if agenttest.Alive(recycled) {
		t.Errorf("Alive(%v) = true for a wrong start time", recycled)
	}
	if err := agenttest.Kill(recycled, 0); err != nil || !agenttest.Alive(e) {
		t.Fatalf("Kill(%v) = %v, and alive = %v; want nil, the real process untouched", recycled, err, agenttest.Alive(e))
	}
	if err := agenttest.Kill(e, 10e9); err != nil {
		t.Fatalf("Kill(%v) error = %v", e, err)
	}
	if agenttest.Alive(e) {
		t.Errorf("Alive(%v) = true after Kill", e)
	}
	if err := agenttest.Kill(e, 0); err != nil {
		t.Errorf("second Kill(%v) error = %v; want nil", e, err)
	}
}

func TestReadPidFileRejectsGarbage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pids")
	if err := os.WriteFile(p, []byte("12 34\n\nnot a pid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if es, err := agenttest.ReadPidFile(p); err == nil {
		t.Errorf("ReadPidFile(%q) = %v, nil; want an error", p, es)
	}
}
