package acp_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/acpfs"
	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/permission"
)

// fsAudit collects an FS's audit records.
type fsAudit struct {
	mu  sync.Mutex
	ops []acpfs.Op
}

func (a *fsAudit) record(op acpfs.Op) {
	a.mu.Lock()
	a.ops = append(a.ops, op)
	a.mu.Unlock()
}

func (a *fsAudit) all() []acpfs.Op {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]acpfs.Op(nil), a.ops...)
}

// bridgeEnv runs script against a backend with an FS, Terminals and a real
// broker for rules, and returns what the agent said.
type bridgeEnv struct {
	h     *harness
	perms *brokerPerms
	audit *fsAudit
}

func runBridge(t *testing.T, rules map[string]string, answer string, steps ...agenttest.Step) bridgeEnv {
	t.Helper()
	dir := t.TempDir()
	audit := &fsAudit{}
	fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir, Audit: audit.record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	terms, err := acpfs.NewTerminals(acpfs.TerminalsConfig{Guard: fs.Guard()})
	if err != nil {
		t.Fatal(err)
	}
	var onRequested func(*permission.Broker, permission.Pending)
	if answer != "" {
		onRequested = func(b *permission.Broker, p permission.Pending) {
			if err := b.Answer(p.Request.Session, p.ID, answer); err != nil {
				t.Errorf("Answer(%q): %v", answer, err)
			}
		}
	}
	bp := newBrokerPerms(t, rules, onRequested)
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n")
	s := agenttest.Script{Turns: []agenttest.Turn{{Steps: steps}}}
	h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir, Permissions: rules}, FS: fs, Terminals: terms, Permissions: bp.fn})
	h.start(t, "")
	if _, err := h.prompt(t, "x"); err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	return bridgeEnv{h: h, perms: bp, audit: audit}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// The provider's fs.read, fs.write and terminal rules are applied: deny
// refuses with a permission-denied JSON-RPC error and nothing happens, ask
// goes to a person through the broker, and every decision is an audit record
// of the bridge action; refusals are audited as refused.
func TestBridgeRules(t *testing.T) {
	write := agenttest.Step{Write: &agenttest.FileOp{Path: "new.txt", Content: "data", Echo: true}}
	read := agenttest.Step{Read: &agenttest.FileOp{Path: "a.txt", Echo: true}}
	term := agenttest.Step{Terminal: &agenttest.Terminal{Command: "touch ran"}}
	tests := []struct {
		name      string
		rules     map[string]string
		answer    string
		step      agenttest.Step
		wantText  string
		action    permission.Action
		decision  permission.Decision
		decidedBy string
		effect    string // file that exists only if the operation ran
		ran       bool
	}{
		{"write denied", map[string]string{"fs.write": "deny", "other": "allow"}, "", write,
			"write error: -32001 Permission denied", permission.ActionFSWrite, permission.DecisionDeny, permission.DecidedByPolicy, "new.txt", false},
		{"read denied", map[string]string{"fs.read": "deny"}, "", read,
			"read error: -32001 Permission denied", permission.ActionFSRead, permission.DecisionDeny, permission.DecidedByPolicy, "", false},
		{"terminal denied", map[string]string{"terminal": "deny", "execute": "allow"}, "", term,
			"terminal error: -32001 Permission denied", permission.ActionTerminal, permission.DecisionDeny, permission.DecidedByPolicy, "ran", false},
		{"write asked, allowed", map[string]string{"fs.write": "ask"}, "allow_once", write,
			"wrote new.txt", permission.ActionFSWrite, permission.DecisionAllow, permission.DecidedByUser, "new.txt", true},
		{"write asked, rejected", map[string]string{"fs.write": "ask"}, "reject_once", write,
			"write error: -32001 Permission denied", permission.ActionFSWrite, permission.DecisionDeny, permission.DecidedByUser, "new.txt", false},
		{"terminal allowed by rule", map[string]string{"terminal": "allow"}, "", term,
			"terminal output", permission.ActionTerminal, permission.DecisionAllow, permission.DecidedByPolicy, "ran", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := runBridge(t, tt.rules, tt.answer, tt.step)
			if tx := env.h.turn.texts(backends.RoleAgent); !contains(tx, tt.wantText) {
				t.Errorf("agent texts = %q; want %q", tx, tt.wantText)
			}
			recs := env.perms.audit()
			if len(recs) != 1 || recs[0].Action != tt.action || recs[0].Decision != tt.decision || recs[0].DecidedBy != tt.decidedBy {
				t.Fatalf("permission records = %+v; want one %s %s by %s", recs, tt.action, tt.decision, tt.decidedBy)
			}
			if tt.effect != "" && exists(filepath.Join(env.h.dir, tt.effect)) != tt.ran {
				t.Errorf("%s exists = %v; want %v", tt.effect, !tt.ran, tt.ran)
			}
			if tt.action != permission.ActionTerminal {
				ops := env.audit.all()
				want := acpfs.OutcomeOK
				if tt.decision == permission.DecisionDeny {
					want = acpfs.OutcomeRefused
				}
				if len(ops) != 1 || ops[0].Outcome != want {
					t.Errorf("fs audit = %+v; want one %s", ops, want)
				}
			}
		})
	}
}

// Without a rule for a bridge action the operation goes ahead with no
// permission request: the default of every mode for bridge operations.
func TestBridgeWithoutRule(t *testing.T) {
	env := runBridge(t, map[string]string{"execute": "deny", "edit": "deny"}, "",
		agenttest.Step{Write: &agenttest.FileOp{Path: "new.txt", Content: "data"}},
		agenttest.Step{Terminal: &agenttest.Terminal{Command: "touch ran"}})
	if recs := env.perms.audit(); len(recs) != 0 {
		t.Errorf("permission records = %+v; want none", recs)
	}
	if !exists(filepath.Join(env.h.dir, "new.txt")) || !exists(filepath.Join(env.h.dir, "ran")) {
		t.Errorf("write or terminal did not run")
	}
}

// JSON-RPC codes: a missing file or cwd is -32002; a non-regular file, a
// file used as a directory, or a cwd that is a file is -32602; a write into
// .git is -32602 and audited as refused, not as an error.
func TestBridgeErrorCodes(t *testing.T) {
	call := func(method, params string) agenttest.Step {
		return agenttest.Step{Request: &agenttest.RawCall{Method: method, Params: []byte(params)}}
	}
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha\n")
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := func(rel string) string { return filepath.Join(dir, rel) }
	tests := []struct {
		name, method, params, want string
	}{
		{"missing file", "fs/read_text_file", `{"sessionId":"s","path":"` + path("nope.txt") + `"}`, "-32002 Resource not found"},
		{"fifo", "fs/read_text_file", `{"sessionId":"s","path":"` + path("fifo") + `"}`, "-32602 Invalid params"},
		{"read under a file", "fs/read_text_file", `{"sessionId":"s","path":"` + path("a.txt/x") + `"}`, "-32602 Invalid params"},
		{"write under a file", "fs/write_text_file", `{"sessionId":"s","path":"` + path("a.txt/x") + `","content":"x"}`, "-32602 Invalid params"},
		{"write fifo", "fs/write_text_file", `{"sessionId":"s","path":"` + path("fifo") + `","content":"x"}`, "-32602 Invalid params"},
		{"write .git", "fs/write_text_file", `{"sessionId":"s","path":"` + path(".git/config") + `","content":"x"}`, "-32602 Invalid params"},
		{"cwd missing", "terminal/create", `{"sessionId":"s","command":"true","cwd":"` + path("nodir") + `"}`, "-32002 Resource not found"},
		{"cwd a file", "terminal/create", `{"sessionId":"s","command":"true","cwd":"` + path("a.txt") + `"}`, "-32602 Invalid params"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			audit := &fsAudit{}
			fs, err := acpfs.NewFS(acpfs.FSConfig{Root: dir, Audit: audit.record})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fs.Close() })
			terms, err := acpfs.NewTerminals(acpfs.TerminalsConfig{Guard: fs.Guard()})
			if err != nil {
				t.Fatal(err)
			}
			s := agenttest.Script{Turns: []agenttest.Turn{{Steps: []agenttest.Step{call(tt.method, tt.params)}}}}
			h := newBackend(t, s, acp.Config{Spec: backends.Spec{Dir: dir}, FS: fs, Terminals: terms})
			h.start(t, "")
			if _, err := h.prompt(t, "x"); err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			if tx := h.turn.texts(backends.RoleAgent); !contains(tx, "request error: "+tt.want) {
				t.Errorf("answer = %q; want %q", tx, tt.want)
			}
			if strings.HasPrefix(tt.method, "fs/") {
				want := acpfs.OutcomeRefused
				if strings.Contains(tt.want, "-32002") {
					want = acpfs.OutcomeNotFound
				}
				if ops := audit.all(); len(ops) != 1 || ops[0].Outcome != want {
					t.Errorf("fs audit = %+v; want one %s", ops, want)
				}
			}
		})
	}
}
