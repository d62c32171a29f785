package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/internal/mockmodel"
	"github.com/agentpool/agentpool/internal/testcert"
	"github.com/agentpool/agentpool/internal/wiring"
	"github.com/agentpool/agentpool/registry"
)

// The real agents TestRealAgentsConfined runs (make test-real-confined),
// each named by the variable of its program that the ACP recorders read
// too; an agent whose variable is unset is skipped.
var realAgents = []realAgent{
	{registry.ProviderClaude, []string{"claude-agent-acp"}, "AGENTPOOL_CLAUDE_ACP_BIN", mockmodel.Anthropic, claudeSetup, claudeCheck},
	{registry.ProviderCodex, []string{"codex-acp"}, "AGENTPOOL_CODEX_ACP_BIN", mockmodel.Responses, codexSetup, nil},
	{registry.ProviderGemini, []string{"gemini", "--acp"}, "AGENTPOOL_GEMINI_BIN", mockmodel.Gemini, geminiSetup, nil},
	{registry.ProviderQwen, []string{"qwen", "--acp"}, "AGENTPOOL_QWEN_BIN", mockmodel.ChatCompletions, qwenSetup, nil},
	{registry.ProviderOpenCode, []string{"opencode", "acp"}, "AGENTPOOL_OPENCODE_BIN", mockmodel.Anthropic, opencodeSetup, nil},
	{registry.ProviderCopilot, []string{"copilot", "--acp"}, "AGENTPOOL_COPILOT_BIN", mockmodel.Anthropic, copilotSetup, nil},
}

// The mock model of the routes through the egress proxy answers to
// realMockHost at realMockAddr, a documentation address (TEST-NET-2) that
// the egress proxy counts as public, so that the entry a user would write
// for a model API ("api.example.com:443", a name) allows it. The test's
// network namespace puts the address on its loopback and /etc/hosts names
// it (see make test-real-confined); outside such a namespace those routes
// are skipped, so nothing ever leaves the machine.
const (
	realMockHost = "api.mock.test"
	realMockAddr = "198.51.100.7"
)

// realPrompt is the prompt of each turn.
const realPrompt = "say hello"

// realAgent is one real agent under test.
type realAgent struct {
	provider string
	// command is the built-in's command.
	command []string
	env     string
	api     mockmodel.API
	// setup prepares the agent's world for a mock at base (scheme, host
	// and port): the files of its home, the variables of the daemon's
	// environment (its keys and endpoints, which the built-in's pass_env
	// hands to it) and its provider's own env (settings, not secrets).
	setup func(t *testing.T, r realRoute) realSetup
	// check, if set, checks what the agent left in its home after the
	// turn.
	check func(t *testing.T, home string)
}

// realRoute is the way an agent reaches its mock.
type realRoute struct {
	// base is the mock's URL (scheme, host and port), as the agent is told.
	base string
	// home is the daemon's (and the agent's) home directory.
	home string
	// ca is the file of the authority that signed the mock's
	// certificate, "" for plain HTTP.
	ca string
}

// realSetup is what an agent needs besides its built-in provider.
type realSetup struct {
	daemonEnv   []string
	providerEnv map[string]string
}

// claudeSetup gives claude the ~/.claude.json of a user who ran it
// before: claudeCheck sees it saved.
func claudeSetup(t *testing.T, r realRoute) realSetup {
	writeHomeFile(t, r.home, ".claude.json", "{}")
	return realSetup{daemonEnv: []string{"ANTHROPIC_API_KEY=" + mockmodel.AnthropicKey, "ANTHROPIC_BASE_URL=" + r.base}}
}

// claudeCheck: claude saved its ~/.claude.json, which it writes in place
// only when it cannot make a temporary file beside it for EACCES.
func claudeCheck(t *testing.T, home string) {
	b, err := os.ReadFile(filepath.Join(home, ".claude.json"))
	if err != nil || strings.TrimSpace(string(b)) == "{}" {
		t.Errorf("claude's ~/.claude.json after a turn: %q, %v; want it saved", b, err)
	}
}

func codexSetup(t *testing.T, r realRoute) realSetup {
	writeHomeFile(t, r.home, ".codex/config.toml", `model = "gpt-5-codex"
model_provider = "mock"

[model_providers.mock]
name = "mock"
base_url = "`+r.base+`/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
`)
	env := []string{"OPENAI_API_KEY=sk-mock"}
	if r.ca != "" {
		env = append(env, "CODEX_CA_CERTIFICATE="+r.ca)
	}
	return realSetup{daemonEnv: env}
}

// geminiSettings are the settings of gemini and qwen: an API key, no
// folder trust (an untrusted folder refuses the privileged modes), no
// updates, no statistics.
func geminiSettings(auth string) string {
	b, _ := json.Marshal(map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": auth}, "folderTrust": map[string]any{"enabled": false}},
		"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
	})
	return string(b)
}

func geminiSetup(t *testing.T, r realRoute) realSetup {
	writeHomeFile(t, r.home, ".gemini/settings.json", geminiSettings("gemini-api-key"))
	return realSetup{daemonEnv: []string{"GEMINI_API_KEY=mock-key", "GOOGLE_GEMINI_BASE_URL=" + r.base}}
}

func qwenSetup(t *testing.T, r realRoute) realSetup {
	writeHomeFile(t, r.home, ".qwen/settings.json", geminiSettings("openai"))
	return realSetup{daemonEnv: []string{"OPENAI_API_KEY=sk-mock", "OPENAI_BASE_URL=" + r.base + "/v1", "OPENAI_MODEL=qwen3-coder-plus"}}
}

func opencodeSetup(t *testing.T, r realRoute) realSetup {
	cfg, _ := json.Marshal(map[string]any{
		"model": "anthropic/claude-sonnet-4-5", "autoupdate": false, "share": "disabled",
		"provider": map[string]any{"anthropic": map[string]any{"options": map[string]any{"baseURL": r.base + "/v1"}}},
	})
	writeHomeFile(t, r.home, ".config/opencode/opencode.json", string(cfg))
	return realSetup{daemonEnv: []string{"ANTHROPIC_API_KEY=" + mockmodel.AnthropicKey},
		providerEnv: map[string]string{"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}}
}

// copilotSetup runs copilot offline with a model provider of the user's
// own (BYOK): it needs no GitHub login.
func copilotSetup(t *testing.T, r realRoute) realSetup {
	return realSetup{
		daemonEnv: []string{"COPILOT_PROVIDER_API_KEY=" + mockmodel.AnthropicKey, "COPILOT_PROVIDER_BASE_URL=" + r.base,
			"COPILOT_PROVIDER_TYPE=anthropic", "COPILOT_MODEL=claude-sonnet-4-5"},
		providerEnv: map[string]string{"COPILOT_OFFLINE": "true", "COPILOT_AUTO_UPDATE": "false"},
	}
}

// writeHomeFile writes content to home/rel, making its directories.
func writeHomeFile(t *testing.T, home, rel, content string) {
	t.Helper()
	p := filepath.Join(home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRealAgentsConfined runs each real agent named in its variable through
// the built daemon, confined as every agent is (its own namespaces, its
// view, Landlock, the egress proxy), with its built-in provider (only its
// network narrowed to the mock), its keys in the daemon's environment:
// `session new` and one prompt must end with the mock model's answer.
// Routes:
//
//   - forward: the mock on the host's 127.0.0.1:PORT, the entry
//     "localhost:PORT", which answers at that port inside the agent's
//     network namespace: the agent connects there directly (or through
//     the proxy, if it ignores NO_PROXY: the entry allows that too);
//   - proxy-http, proxy-https: the mock named api.mock.test, at a public
//     address only the daemon's side can reach, the entry
//     "api.mock.test:PORT": the agent gets there only through the proxy
//     variables (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY); over https it must
//     also trust the mock's authority, named by NODE_EXTRA_CA_CERTS,
//     SSL_CERT_FILE and CODEX_CA_CERTIFICATE.
func TestRealAgentsConfined(t *testing.T) {
	var named bool
	for _, a := range realAgents {
		named = named || os.Getenv(a.env) != ""
	}
	if !named {
		t.Skip("no real agent named (make test-real-confined)")
	}
	bin := agentpoolBinary(t)
	proxied := proxyRouteReady()
	for _, a := range realAgents {
		for _, route := range []string{"forward", "proxy-http", "proxy-https"} {
			t.Run(a.provider+"/"+route, func(t *testing.T) {
				prog := os.Getenv(a.env)
				if prog == "" {
					t.Skip(a.env + " is not set")
				}
				if route != "forward" && proxied != "" {
					t.Skip(proxied)
				}
				runRealAgent(t, bin, a, prog, route)
			})
		}
	}
}

// proxyRouteReady returns "" when the routes through the proxy can run:
// realMockAddr is an address of this machine (of the test's network
// namespace) and /etc/hosts names it realMockHost. It never asks DNS.
func proxyRouteReady() string {
	ln, err := net.Listen("tcp", realMockAddr+":0")
	if err != nil {
		return realMockAddr + " is not an address here (make test-real-confined gives it to a network namespace's loopback)"
	}
	ln.Close()
	f, err := os.Open("/etc/hosts")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[0] == realMockAddr && slices.Contains(fields[1:], realMockHost) {
			return ""
		}
	}
	return "/etc/hosts does not name " + realMockAddr + " " + realMockHost + " (make test-real-confined binds one that does)"
}

// runRealAgent runs one agent on one route and checks its answer.
func runRealAgent(t *testing.T, bin string, a realAgent, prog, route string) {
	base := t.TempDir()
	r := realRoute{home: filepath.Join(base, "home")}
	daemonHome, repo := filepath.Join(base, "daemon"), filepath.Join(base, "repo")
	for _, d := range []string{r.home, daemonHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e2eRepoAt(t, repo, map[string]string{"README.md": "# demo\n"})

	var (
		cfg   mockmodel.Config
		entry string
		env   []string
	)
	switch route {
	case "forward":
		cfg.Addr = "127.0.0.1:0"
	case "proxy-https":
		ca, tlsCfg := testcert.ForHosts(t, base, realMockHost)
		r.ca, cfg.TLS = ca, tlsCfg
		env = append(env, "NODE_EXTRA_CA_CERTS="+ca, "SSL_CERT_FILE="+ca)
		fallthrough
	default:
		cfg.Addr = realMockAddr + ":0"
	}
	mock := mockmodel.New(t, a.api, cfg)
	port := mock.Port()
	switch route {
	case "forward":
		entry, r.base = fmt.Sprintf("localhost:%d", port), fmt.Sprintf("http://127.0.0.1:%d", port)
	case "proxy-http":
		entry, r.base = fmt.Sprintf("%s:%d", realMockHost, port), fmt.Sprintf("http://%s:%d", realMockHost, port)
	case "proxy-https":
		entry, r.base = fmt.Sprintf("%s:%d", realMockHost, port), fmt.Sprintf("https://%s:%d", realMockHost, port)
	}
	setup := a.setup(t, r)
	// The daemon's state goes where it would without the test's choice
	// (startDaemon's), and agents get XDG_STATE_HOME as the user has it.
	env = append(env, "XDG_STATE_HOME="+filepath.Join(r.home, ".local", "state"))
	env = append(env, setup.daemonEnv...)

	// The built-in provider, with its command found on PATH (or named,
	// when the program has another name), its network narrowed to the
	// mock; the other built-ins whose programs share its directory are
	// off, so that they are not probed.
	entryDoc := map[string]any{"sandbox": map[string]any{"network": []string{entry}}}
	if len(setup.providerEnv) > 0 {
		entryDoc["env"] = setup.providerEnv
	}
	provs := map[string]any{a.provider: entryDoc}
	for _, o := range realAgents {
		if o.provider != a.provider {
			provs[o.provider] = map[string]any{"enabled": false}
		}
	}
	if filepath.Base(prog) != a.command[0] {
		entryDoc["command"] = append([]string{prog}, a.command[1:]...)
	}
	doc, _ := json.MarshalIndent(map[string]any{"version": 1, "providers": provs}, "", "  ")
	if err := os.WriteFile(filepath.Join(daemonHome, providersFile), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", r.home)
	t.Setenv("PATH", filepath.Dir(prog)+string(os.PathListSeparator)+os.Getenv("PATH"))
	d := startDaemon(t, bin, daemonHome, env...)
	d.stopAtCleanup()
	version := packageVersion(prog)
	t.Logf("%s (%s), route %s: entry %q, base URL %s", a.provider, version, route, entry, r.base)
	waitProviderStatusWithin(t, d, a.provider, registry.StatusReady, 90*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	out, err := d.cliCtx(ctx, "session", "new", "--repo", repo, "--agent", a.provider)
	if err != nil {
		t.Fatalf("session new: %v\n%s\ndaemon log:\n%s", err, out, d.out)
	}
	m := regexp.MustCompile(`session (\S+) created`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("session new output has no id:\n%s", out)
	}
	id := m[1]
	out, err = d.cliCtx(ctx, "prompt", id, realPrompt)
	evs, _ := d.client.EventLog(context.Background(), id, 0)
	for _, ev := range evs {
		switch ev.Type {
		case wiring.EventNetworkRefused, backends.EventSandboxRefused, backends.EventError:
			t.Logf("event %s: %s", ev.Type, ev.Data)
		}
	}
	var paths []string
	for _, rq := range mock.Requests() {
		paths = append(paths, rq.Method+" "+rq.Host+rq.Path)
	}
	t.Logf("the mock served %d requests: %q", len(paths), paths)
	t.Logf("its connections through the egress proxy: %q", egressConnections(d.out.String()))
	t.Logf("the agent's stderr:\n%s", agentStderr(d.out.String(), 40))
	t.Logf("what its home holds: %q", homeTree(r.home, 3))
	if err != nil || !strings.Contains(out, mockmodel.Reply) {
		t.Errorf("%s (%s) over %s: prompt: %v; want the mock's answer %q in:\n%s", a.provider, version, route, err, mockmodel.Reply, out)
		t.Logf("daemon log:\n%s", d.out)
		return
	}
	t.Logf("%s (%s) over %s: answered %q", a.provider, version, route, mockmodel.Reply)
	if a.check != nil {
		a.check(t, r.home)
	}
}

// packageVersion returns "name@version" of the npm package the program
// lies in, or the program's name.
func packageVersion(prog string) string {
	real, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return filepath.Base(prog)
	}
	for dir := filepath.Dir(real); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "package.json"))
		if err != nil {
			continue
		}
		var p struct{ Name, Version string }
		if json.Unmarshal(b, &p) == nil && p.Name != "" {
			return p.Name + "@" + p.Version
		}
	}
	return filepath.Base(prog)
}

// waitProviderStatusWithin is waitProviderStatus with a deadline of its
// own: a real agent's probe takes seconds.
func waitProviderStatusWithin(t *testing.T, d *daemon, id, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		snap, err := d.client.Providers(context.Background())
		if err == nil {
			if p, ok := snap.Provider(id); ok && p.Status == want {
				return
			} else if ok && (time.Now().After(deadline) || p.Status == registry.StatusError) {
				b, _ := json.MarshalIndent(p, "", "  ")
				t.Fatalf("provider %q never got status %s:\n%s\ndaemon log:\n%s", id, want, b, d.out)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %q never got status %s: %v\n%s", id, want, err, d.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cliCtx is cli bounded by ctx.
func (d *daemon) cliCtx(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.bin, args...)
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+d.home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// agentStderr returns the distinct lines of the agents' stderr in a
// daemon's log, at most max of them.
func agentStderr(log string, max int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		_, line, ok := strings.Cut(l, `msg="agent stderr" `)
		if !ok {
			continue
		}
		if _, rest, ok := strings.Cut(line, " line="); ok {
			line = rest
		}
		if !slices.Contains(out, line) && len(out) < max {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// egressConnections returns the distinct "proto target" pairs of the
// connections the egress proxy made for agents, as its log says: a
// forwarded port's relay asks for its entry ("connect localhost:PORT"),
// an agent going through the proxy variables for its URL's host ("http
// api.mock.test:PORT", "connect api.mock.test:PORT").
func egressConnections(log string) []string {
	field := func(line, key string) string {
		_, v, _ := strings.Cut(line, " "+key+"=")
		v, _, _ = strings.Cut(v, " ")
		return v
	}
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `msg="egress: connected"`) {
			continue
		}
		c := field(l, "proto") + " " + field(l, "target")
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// homeTree lists the paths under home, relative, down to depth levels:
// the state an agent kept there.
func homeTree(home string, depth int) []string {
	var out []string
	_ = filepath.WalkDir(home, func(p string, e os.DirEntry, err error) error {
		rel, _ := filepath.Rel(home, p)
		if err != nil || rel == "." {
			return nil
		}
		if strings.Count(rel, string(filepath.Separator)) >= depth {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	return out
}
