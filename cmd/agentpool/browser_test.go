package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/httpapi/apitest"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// browserNames are the programs the browser tests look for, Debian's first.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns a Chromium to drive, or skips the test naming what
// is missing; under CI=true a missing browser fails instead.
func findBrowser(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a real browser")
	}
	for _, n := range browserNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("no browser for the web page tests: none of %s is on PATH (apt-get install chromium)", strings.Join(browserNames, ", "))
	agenttest.RequireFeature(t, false, msg)
	return ""
}

// browser is a headless Chromium on a fresh profile, with a screenshot per
// step: into t.TempDir(), copied to a kept directory when the test fails.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	n     int
}

func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, shots: t.TempDir()}
	if err := chromedp.Do(ctx); err != nil {
		cancelC()
		cancelA()
		t.Fatalf("start %s: %v", exe, err)
	}
	t.Cleanup(func() {
		cancelC()
		cancelA()
		// Kept on failure, or always when AGENTPOOL_SCREENSHOTS names a directory.
		keep := os.Getenv("AGENTPOOL_SCREENSHOTS")
		if t.Failed() || keep != "" {
			if keep == "" {
				keep = filepath.Join(os.TempDir(), "agentpool-browser-screenshots")
			}
			if err := os.MkdirAll(keep, 0o755); err == nil {
				ents, _ := os.ReadDir(b.shots)
				for _, e := range ents {
					if data, err := os.ReadFile(filepath.Join(b.shots, e.Name())); err == nil {
						_ = os.WriteFile(filepath.Join(keep, e.Name()), data, 0o644)
					}
				}
				t.Logf("screenshots kept in %s", keep)
			}
		}
	})
	return b
}

// run runs actions within a deadline, failing the test with a screenshot.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("FAILED-" + what)
		b.t.Fatalf("%s: %v", what, err)
	}
}

// shot saves a screenshot of the page named after the step.
func (b *browser) shot(name string) string {
	b.t.Helper()
	b.n++
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.n, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
	}
	return p
}

// evalJS evaluates a JavaScript expression to a T.
func evalJS[T any](b *browser, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		b.shot("FAILED-eval")
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// js is an action that runs a JavaScript statement for its effect.
func js(stmt string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool]("(() => { "+stmt+" })(), true")(ctx, t)
		return err
	})
}

// waitJS waits until a JavaScript expression is true.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.shot("FAILED-" + what)
			b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// browserProviders is the providers.json of the browser test: an agent
// whose message carries markup, a paced flood of chunks, and a shell on a
// terminal.
func browserProviders(t *testing.T, bin string) string {
	t.Helper()
	xss := map[string]any{"agent_name": "xss", "turns": []any{map[string]any{"steps": []any{
		map[string]any{"chunk": `Look: <script>window.__xss=1</script><img src=x onerror="window.__xss=2"> <b>not bold</b>` + "\n"},
	}}}}
	flood := map[string]any{"agent_name": "flood", "turns": []any{map[string]any{"steps": []any{
		map[string]any{"chunks": 3000, "chunks_per_second": 1000},
	}}}}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	bash, err := exec.LookPath("bash")
	if err != nil {
		bash = "/bin/bash"
	}
	cfg := map[string]any{"version": 1, "providers": map[string]any{
		"xss":   map[string]any{"extends": "acp", "label": "Markup agent", "command": []string{bin, "demo-agent"}, "env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": js(xss)}},
		"flood": map[string]any{"extends": "acp", "label": "Flood agent", "command": []string{bin, "demo-agent"}, "env": map[string]string{"AGENTPOOL_DEMO_SCRIPT": js(flood)}},
		"shell": map[string]any{"extends": "pty", "label": "Shell", "command": []string{bash, "--norc", "--noprofile", "-i"},
			"env": map[string]string{"PS1": "agentpool$ ", "HISTFILE": "", "PROMPT_COMMAND": ""}, "ready_pattern": `^agentpool\$ $`},
	}}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// TestBrowserPage drives the web page in Chromium against the real daemon:
// log in with a one-time link, create a session, prompt the demo agent,
// approve in the dialog, see the diff, restore, toggle a provider and break
// providers.json, add providers from the catalog and by hand, check that
// markup from an agent stays text, stream a flood of events, evict an
// agent from the pool, and type into a terminal agent from two tabs.
func TestBrowserPage(t *testing.T) {
	exe := findBrowser(t)
	bin := agentpoolBinary(t)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(browserProviders(t, bin)), 0o600); err != nil {
		t.Fatal(err)
	}
	repo := e2eRepoAt(t, filepath.Join(t.TempDir(), "web repo"), map[string]string{"README.md": "# web project\n"})

	d := startDaemon(t, bin, home)
	d.stopAtCleanup()
	b := newBrowser(t, exe)
	start := time.Now()

	// Log in through a one-time link from `agentpool open`.
	out, err := d.cli("open")
	if err != nil {
		t.Fatalf("agentpool open: %v\n%s", err, out)
	}
	link := strings.TrimSpace(out)
	if !strings.HasPrefix(link, d.client.BaseURL+"/login#code=") {
		t.Fatalf("agentpool open printed %q; want a link on %s", link, d.client.BaseURL)
	}
	b.run("open the login link", chromedp.Navigate(link))
	b.waitJS("the sessions page", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions' && document.querySelector('form input[name=repo]')`)
	assertPageLoggedIn(t, b, d)
	b.shot("sessions-empty")
	fcp := evalJS[float64](b, `(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime`)
	t.Logf("first contentful paint of the page: %.0f ms after the navigation began", fcp)

	// The link worked once.
	_, code, _ := strings.Cut(link, "#code=")
	second := evalJS[int](b, `fetch('/v1/login', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({code: `+jsString(code)+`})}).then(r => r.status)`, chromedp.EvalAwaitPromise)
	if second != 401 {
		t.Errorf("second use of the login link = %d; want 401", second)
	}

	// Create a session on the test repository with the demo agent.
	b.run("fill the new session form",
		chromedp.SetValue(chromedp.CSS(`form input[name=repo]`), repo),
		chromedp.SetValue(chromedp.CSS(`form select[name=agent]`), "demo"),
		chromedp.Click(chromedp.CSS(`form button[type=submit]`)))
	b.waitJS("the session view", `location.hash.startsWith('#/s/') && document.querySelector('.composer textarea')`)
	id := evalJS[string](b, `decodeURIComponent(location.hash.slice(4))`)
	sess, err := d.client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}

	// Prompt; the approval dialog opens, and the tab title counts it.
	b.run("send a prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "add a greeting"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_once]')`)
	b.waitJS("the needs-you count in the title", `document.title.startsWith('(1) ')`)
	b.waitJS("the needs-you badge", `!document.getElementById('needs').hidden && document.getElementById('needs-count').textContent === '1'`)
	b.shot("approval-dialog")
	dlg := evalJS[string](b, `document.querySelector('dialog#approval').innerText`)
	for _, want := range []string{"Write AGENTPOOL_DEMO.md", "edit", "medium", "AGENTPOOL_DEMO.md", "Allow", "Reject"} {
		if !strings.Contains(dlg, want) {
			t.Errorf("approval dialog lacks %q:\n%s", want, dlg)
		}
	}
	// Focus starts on "Reject"; approve from the keyboard with the digit
	// of "Allow once", the first button whatever the agent's order.
	focused := evalJS[string](b, `document.activeElement.dataset.kind || ''`)
	if focused != "reject_once" {
		t.Errorf("focused option = %q; want reject_once", focused)
	}
	b.run("approve with the keyboard", chromedp.KeyEvent("1"))
	b.waitJS("the turn's end", `[...document.querySelectorAll('.turn-foot button')].some(x => x.textContent === 'View changes')`)
	b.waitJS("the count cleared", `document.title === 'agentpool'`)
	convo := evalJS[string](b, `document.querySelector('.stream').innerText`)
	for _, want := range []string{"add a greeting", "Looking at the repository first.", "Read README.md", "Done: AGENTPOOL_DEMO.md", "end turn"} {
		if !strings.Contains(convo, want) {
			t.Errorf("conversation lacks %q:\n%s", want, convo)
		}
	}
	b.shot("turn-ended")

	// The turn's diff lists the file the agent wrote.
	b.run("view the changes", js(`[...document.querySelectorAll('.turn-foot button')].find(x => x.textContent === 'View changes').click()`))
	b.waitJS("the diff", `[...document.querySelectorAll('.files li')].some(li => li.textContent.includes('AGENTPOOL_DEMO.md')) && document.querySelector('.diff .a')`)
	b.shot("turn-diff")

	// Restore to before the turn: the file leaves the worktree.
	demoFile := filepath.Join(sess.Worktree.Path, "AGENTPOOL_DEMO.md")
	if _, err := os.Stat(demoFile); err != nil {
		t.Fatalf("the agent's file is not in the worktree: %v", err)
	}
	b.run("restore", js(`[...document.querySelectorAll('.changes button')].find(x => x.textContent === 'Restore to before turn 1').click()`))
	b.waitJS("the restore confirmation", `document.querySelector('dialog#confirm').open`)
	b.shot("restore-confirm")
	b.run("confirm the restore", chromedp.Click(chromedp.CSS(`dialog#confirm button.primary`)))
	waitFor(t, "the restore to remove the agent's file", func() bool { _, err := os.Stat(demoFile); return os.IsNotExist(err) })

	// The audit lists the permission decision and the file access.
	b.run("open the audit", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent.startsWith('Audit')).click()`))
	b.waitJS("the audit rows", `[...document.querySelectorAll('.tab-body table tbody tr')].some(r => r.textContent.includes('AGENTPOOL_DEMO.md'))`)
	b.shot("audit")

	// A second turn: the demo agent numbers its tool calls per turn
	// ("read-1" again), and they are the second turn's own cards, not
	// updates of the first turn's.
	b.run("back to the conversation", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent === 'Conversation').click()`))
	b.run("send a second prompt",
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "and a farewell"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the second approval dialog", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_once]')`)
	b.run("approve the second", chromedp.KeyEvent("1"))
	b.waitJS("the second turn's end", `[...document.querySelectorAll('section.turn[data-turn="2"] .turn-foot button')].some(x => x.textContent === 'View changes')`)
	toolsOf := func(turn int) string {
		return evalJS[string](b, fmt.Sprintf(`[...document.querySelectorAll('section.turn[data-turn="%d"] .tool')].map(x => x.innerText.replace(/\s+/g, ' ').trim()).join(' | ')`, turn))
	}
	for turn := 1; turn <= 2; turn++ {
		got := toolsOf(turn)
		if strings.Count(got, "Read README.md") != 1 || strings.Count(got, "Write AGENTPOOL_DEMO.md") != 1 || strings.Count(got, "completed") != 2 {
			t.Errorf("turn %d's tool cards = %q; want its own completed Read README.md and Write AGENTPOOL_DEMO.md", turn, got)
		}
	}
	b.shot("second-turn")

	// Markup in an agent's message shows as text.
	b.run("prompt the markup agent",
		chromedp.SetValue(chromedp.CSS(`.composer select[name=agent]`), "xss"), js(`document.querySelector(".composer select[name=agent]").dataset.touched = "1"`),
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "show me markup"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the markup message", `[...document.querySelectorAll('.msg')].some(m => m.textContent.includes('<script>window.__xss=1</script>'))`)
	injected := evalJS[bool](b, `window.__xss !== undefined || !!document.querySelector('.stream img, .stream script, .stream b')`)
	if injected {
		t.Error("markup in an agent message became HTML")
	}
	b.shot("markup-as-text")

	// A hidden tab: a turn that ends and a permission request each raise a
	// notification and count in the title; showing the tab clears the
	// turn's count, the request's stays until it is answered. Chromium
	// headless neither hides a tab nor shows notifications: the page sees
	// document.hidden and a Notification that records what it is given.
	b.run("hide the tab", js(`window.__notes = [];
		window.Notification = function (title, o) { window.__notes.push(title + ' | ' + ((o && o.body) || '')); };
		window.Notification.permission = 'granted';
		Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
		Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
		document.dispatchEvent(new Event('visibilitychange'))`))
	ctx := context.Background()
	if _, err := d.client.Prompt(ctx, sess.ID, "xss", "while you were away", true); err != nil {
		t.Fatalf("Prompt(xss): %v", err)
	}
	b.waitJS("the turn-ended notification", `window.__notes.some(n => n.startsWith('Turn ended: end_turn | '))`)
	b.waitJS("the unseen turn in the title", `document.title === '(1) agentpool'`)
	if _, err := d.client.Prompt(ctx, sess.ID, "demo", "approve me later", false); err != nil {
		t.Fatalf("Prompt(demo): %v", err)
	}
	b.waitJS("the permission notification", `window.__notes.some(n => n.startsWith('demo asks for permission | Write AGENTPOOL_DEMO.md'))`)
	b.waitJS("the title counting both", `document.title === '(2) agentpool'`)
	b.run("show the tab", js(`delete document.hidden; delete document.visibilityState; document.dispatchEvent(new Event('visibilitychange'))`))
	b.waitJS("the seen turn no longer counted", `document.title === '(1) agentpool'`)
	b.waitJS("the approval dialog of the hidden request", `document.querySelector('dialog#approval').open && document.querySelector('dialog#approval button[data-kind=allow_once]')`)
	b.run("approve it", chromedp.KeyEvent("1"))
	b.waitJS("nothing counted", `document.title === 'agentpool'`)
	if n := evalJS[int](b, `window.__notes.length`); n != 2 {
		t.Errorf("notifications = %d (%v); want 2: nothing while the tab shows the session", n, evalJS[[]string](b, `window.__notes`))
	}

	// Providers: toggle one; the file on disk changes, its other fields stay.
	b.run("open providers", chromedp.Navigate(d.client.BaseURL+"/#/providers"))
	b.waitJS("the providers", `document.querySelector('[data-provider=flood] input[type=checkbox]')`)
	b.shot("providers")
	b.run("disable flood", js(`document.querySelector("[data-provider=flood] input[type=checkbox]").click()`))
	b.waitJS("flood disabled", `document.querySelector('[data-provider=flood] [data-status]').dataset.status === 'disabled'`)
	var onDisk struct {
		Providers map[string]map[string]any `json:"providers"`
	}
	raw, err := os.ReadFile(filepath.Join(home, providersFile))
	if err != nil || json.Unmarshal(raw, &onDisk) != nil {
		t.Fatalf("read providers.json: %v\n%s", err, raw)
	}
	if f := onDisk.Providers["flood"]; f["enabled"] != false || f["command"] == nil || f["env"] == nil {
		t.Errorf("providers.json flood = %v; want enabled false and its command and env kept", f)
	}
	b.run("enable flood again", js(`document.querySelector("[data-provider=flood] input[type=checkbox]").click()`))
	b.waitJS("flood enabled", `document.querySelector('[data-provider=flood] [data-status]').dataset.status !== 'disabled'`)

	// A file broken by hand shows its diagnostic, without a reload.
	good, err := os.ReadFile(filepath.Join(home, providersFile))
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(good), "{", "{,", 1)
	if err := os.WriteFile(filepath.Join(home, providersFile), []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	b.waitJS("the diagnostic", `document.querySelector('[data-diagnostic]') && /providers\.json:1:2: /.test(document.querySelector('[data-diagnostic]').textContent)`)
	t.Logf("a broken providers.json showed in the page %v after the edit", time.Since(edited).Round(time.Millisecond))
	b.shot("providers-diagnostic")
	if err := os.WriteFile(filepath.Join(home, providersFile), good, 0o600); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the diagnostic gone", `!document.querySelector('[data-diagnostic]')`)

	// Add provider: the catalog says which agents are built in; one not
	// built in is added from the catalog, a custom one through the form.
	openAdd := func() {
		b.run("open Add provider", js(`document.querySelector('.page-head button.primary').click()`))
		b.waitJS("the Add provider dialog", `document.querySelector('dialog.addprov') && document.querySelector('dialog.addprov').open && document.activeElement.closest('dialog.addprov')`)
	}
	openAdd()
	if txt := evalJS[string](b, `document.querySelector('[data-catalog=claude]').innerText`); !strings.Contains(txt, "built-in") || !strings.Contains(txt, "See its card") {
		t.Errorf("catalog entry of Claude Code = %q; want it shown built in, with a link to its card", txt)
	}
	b.shot("add-provider")
	b.run("close it with Esc", chromedp.KeyEvent(kb.Escape))
	b.waitJS("the dialog closed", `!document.querySelector('dialog.addprov')`)
	openAdd()
	b.run("use Amp from the catalog", js(`document.querySelector('[data-catalog=amp] button').click()`))
	if got := evalJS[string](b, `[...document.querySelectorAll('dialog.addprov [name]')].map(x => x.name + '=' + x.value).join(' ')`); !strings.Contains(got, "id=amp label=Amp extends=acp command=amp-acp") {
		t.Errorf("the form after Use on Amp = %q; want it filled in", got)
	}
	b.run("add Amp with Enter", chromedp.KeyEvent("\r"))
	b.waitJS("Amp's card, not installed", `document.querySelector('[data-provider=amp] [data-status=not_installed]') && !document.querySelector('dialog.addprov')`)
	b.shot("provider-added-not-installed")

	openAdd()
	if txt := evalJS[string](b, `document.querySelector('[data-catalog=amp]').innerText`); !strings.Contains(txt, "added as amp") {
		t.Errorf("catalog entry of Amp after adding it = %q; want \"added as amp\"", txt)
	}
	b.run("fill a custom provider with a bad id",
		chromedp.SetValue(chromedp.CSS(`dialog.addprov input[name=id]`), "My Agent"),
		chromedp.SetValue(chromedp.CSS(`dialog.addprov input[name=label]`), "My demo"),
		chromedp.SetValue(chromedp.CSS(`dialog.addprov input[name=command]`), bin+" "+registry.DemoAgentArg),
		chromedp.SetValue(chromedp.CSS(`dialog.addprov textarea[name=env]`), "MY_SETTING=on"),
		chromedp.Click(chromedp.CSS(`dialog.addprov button[type=submit]`)))
	b.waitJS("the daemon's diagnostic in the dialog", `document.querySelector('dialog.addprov .form-errors code') && document.querySelector('dialog.addprov .form-errors').textContent.includes('providers["My Agent"]: invalid provider id')`)
	if !evalJS[bool](b, `document.querySelector('dialog.addprov input[name=id]').getAttribute('aria-invalid') === 'true' && document.activeElement.name === 'id'`) {
		t.Error("the id field is not marked invalid and focused after the daemon refused the id")
	}
	b.shot("add-provider-error")
	b.run("fix the id", chromedp.SetValue(chromedp.CSS(`dialog.addprov input[name=id]`), "mine"),
		chromedp.Click(chromedp.CSS(`dialog.addprov button[type=submit]`)))
	b.waitJS("the custom provider's card", `document.querySelector('[data-provider=mine] [data-status=ready]') && document.querySelector('[data-provider=mine]').textContent.includes('My demo')`)
	b.shot("provider-added")
	raw, err = os.ReadFile(filepath.Join(home, providersFile))
	if err != nil || json.Unmarshal(raw, &onDisk) != nil {
		t.Fatalf("read providers.json: %v\n%s", err, raw)
	}
	mine, amp := onDisk.Providers["mine"], onDisk.Providers["amp"]
	if mine["extends"] != "acp" || mine["label"] != "My demo" || fmt.Sprint(mine["command"]) != fmt.Sprint([]any{bin, registry.DemoAgentArg}) ||
		fmt.Sprint(mine["env"]) != "map[MY_SETTING:on]" || amp["extends"] != "acp" || fmt.Sprint(amp["command"]) != "[amp-acp]" {
		t.Errorf("providers.json holds mine = %v, amp = %v; want the entries added in the page", mine, amp)
	}

	// A flood of 1 000 events a second: the page keeps painting.
	fs, err := d.client.CreateSession(context.Background(), createReq(repo, "flood"))
	if err != nil {
		t.Fatal(err)
	}
	b.run("open the flood session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+fs.ID))
	b.waitJS("the flood session", `document.querySelector('.session h1') && document.querySelector('.session h1').textContent === `+jsString(fs.ID))
	b.run("start the flood", js(`window.__gaps = []; (function tick(last) { requestAnimationFrame(t => { window.__gaps.push(t - last); if (window.__gaps.length < 100000) tick(t); }); })(performance.now()); true`),
		chromedp.SetValue(chromedp.CSS(`.composer textarea`), "flood"),
		chromedp.Click(chromedp.CSS(`.composer button[type=submit]`)))
	b.waitJS("the flood's end", `[...document.querySelectorAll('.turn-foot .badge')].some(x => x.textContent === 'end turn')`)
	worst := evalJS[float64](b, `Math.max(...window.__gaps)`)
	frames := evalJS[int](b, `window.__gaps.length`)
	t.Logf("3 000 chunks at 1 000/s: %d frames, longest frame gap %.0f ms", frames, worst)
	b.shot("flood")

	// Retry the last turn: the same prompt runs again as turn 2; cancel it
	// from its button while it streams.
	b.waitJS("the retry button", `(() => { const x = [...document.querySelectorAll('.composer button')].find(x => x.textContent === 'Retry last turn'); return x && !x.hidden; })()`)
	b.run("retry the last turn", js(`[...document.querySelectorAll('.composer button')].find(x => x.textContent === 'Retry last turn').click()`))
	b.waitJS("the retried turn streaming", `document.querySelector('section.turn[data-turn="2"] .turn-body') && document.querySelector('section.turn[data-turn="2"] .turn-body').textContent.length > 100`)
	if p := evalJS[string](b, `document.querySelector('section.turn[data-turn="2"] .prompt').textContent`); p != "flood" {
		t.Errorf("retried turn's prompt = %q; want flood", p)
	}
	b.waitJS("the cancel button", `(() => { const x = [...document.querySelectorAll('.composer button')].find(x => x.textContent === 'Cancel turn'); return x && !x.hidden; })()`)
	b.run("cancel the turn", js(`[...document.querySelectorAll('.composer button')].find(x => x.textContent === 'Cancel turn').click()`))
	b.waitJS("the cancelled turn's end", `[...document.querySelectorAll('section.turn[data-turn="2"] .turn-foot .badge')].some(x => x.textContent === 'cancelled')`)
	b.shot("flood-retried-cancelled")
	if tn, err := d.client.Turn(context.Background(), fs.ID, 2, false); err != nil || tn.StopReason != "cancelled" || tn.Prompt != "flood" {
		t.Errorf("turn 2 of the flood session = %+v, %v; want the prompt flood, cancelled", tn, err)
	}

	// The pool lists the warm agents with their pid and confinement.
	b.run("open the pool", chromedp.Navigate(d.client.BaseURL+"/#/pool"))
	b.waitJS("the pool's agents", `document.querySelectorAll('tr[data-agent]').length >= 3 && document.querySelector('tr[data-agent=flood]').textContent.match(/\d{2,}/)`)
	b.shot("pool")

	// Evict the idle markup agent from the pool view: the confirmation
	// names it and its session, and the row goes once it has stopped.
	if evalJS[bool](b, `document.querySelector('tr[data-agent=xss] button[data-evict]').disabled`) {
		t.Error("the Evict button of an idle agent is disabled")
	}
	b.run("ask to evict", js(`document.querySelector('tr[data-agent=xss] button[data-evict]').click()`))
	b.waitJS("the evict confirmation", `document.querySelector('dialog#confirm').open`)
	if txt := evalJS[string](b, `document.querySelector('dialog#confirm').innerText`); !strings.Contains(txt, "xss") || !strings.Contains(txt, id) {
		t.Errorf("evict confirmation = %q; want it to name agent xss and session %s", txt, id)
	}
	b.shot("evict-confirm")
	b.run("evict", js(`document.querySelector('dialog#confirm button.danger').click()`))
	b.waitJS("the evicted agent gone", `!document.querySelector('tr[data-agent=xss]') && document.querySelector('tr[data-agent=flood]')`)
	b.shot("pool-evicted")
	if st, err := d.client.Pool(context.Background()); err != nil {
		t.Fatal(err)
	} else {
		for _, be := range st.Backends {
			if be.Agent == "xss" {
				t.Errorf("the pool still holds %+v after the eviction", be)
			}
		}
	}
	// And from the command line: a running agent goes, a cold one is 404.
	if out, err := d.cli("evict", id, "demo"); err != nil || !strings.Contains(out, "evicted") {
		t.Errorf("agentpool evict %s demo = %q, %v; want it evicted", id, out, err)
	}
	if out, err := d.cli("evict", id, "xss"); err == nil || !strings.Contains(out, "no warm agent") {
		t.Errorf("agentpool evict %s xss (evicted already) = %q, %v; want a not-found error", id, out, err)
	}

	// A terminal agent: attach and type a command.
	ps, err := d.client.CreateSession(context.Background(), createReq(repo, "shell"))
	if err != nil {
		t.Fatal(err)
	}
	b.run("open the shell session", chromedp.Navigate(d.client.BaseURL+"/#/s/"+ps.ID))
	b.waitJS("the shell session", `document.querySelector('.session h1') && document.querySelector('.session h1').textContent === `+jsString(ps.ID))
	b.waitJS("the terminal tab", `[...document.querySelectorAll('.tabs button')].some(x => x.textContent === 'Terminal' && !x.hidden)`)
	b.run("open the terminal", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent === 'Terminal').click()`))
	b.waitJS("the prompt in the terminal", `document.querySelector('.xterm-rows') && document.querySelector('.xterm-rows').textContent.includes('agentpool$')`)
	// Typed as text input (Input.insertText): key events that carry text
	// reach xterm twice in headless Chromium.
	b.run("type a command", chromedp.Focus(chromedp.CSS(`.xterm-helper-textarea`)), insertText("echo hello-$((40+2))"), chromedp.KeyEvent("\r"))
	b.waitJS("the command's output", `document.querySelector('.xterm-rows').textContent.includes('hello-42')`)
	b.shot("terminal")

	// A second viewer, in another tab: it sees the screen and what the
	// first types; its keys are refused while the first holds the
	// keyboard, and go through once the first releases it.
	tab2, closeTab2 := chromedp.NewContext(b.ctx)
	defer closeTab2()
	// The first Do opens the tab, for the life of tab2 (not of a timeout).
	if err := chromedp.Do(tab2); err != nil {
		t.Fatalf("open a second tab: %v", err)
	}
	b2 := &browser{t: t, ctx: tab2, shots: b.shots, n: 50}
	b2.run("open the terminal in a second tab", chromedp.Navigate(d.client.BaseURL+"/#/s/"+ps.ID))
	b2.waitJS("the terminal tab in the second tab", `[...document.querySelectorAll('.tabs button')].some(x => x.textContent === 'Terminal' && !x.hidden)`)
	b2.run("open the second terminal", js(`[...document.querySelectorAll('.tabs button')].find(x => x.textContent === 'Terminal').click()`))
	b2.waitJS("the screen in the second viewer", `document.querySelector('.xterm-rows') && document.querySelector('.xterm-rows').textContent.includes('hello-42')`)
	b.run("type in the first tab", chromedp.Focus(chromedp.CSS(`.xterm-helper-textarea`)), insertText("echo one-$((1+1))"), chromedp.KeyEvent("\r"))
	b2.waitJS("the first viewer's command in the second", `document.querySelector('.xterm-rows').textContent.includes('one-2')`)
	b2.run("type in the second tab", chromedp.Focus(chromedp.CSS(`.xterm-helper-textarea`)), insertText("x"))
	b2.waitJS("the keyboard held by the first", `document.querySelector('.term-wrap .muted').textContent === 'another viewer is typing'`)
	b.run("release the keyboard", js(`[...document.querySelectorAll('.term-wrap button')].find(x => x.textContent === 'Release keyboard').click()`))
	b.waitJS("the first viewer watching", `document.querySelector('.term-wrap .muted').textContent.startsWith('watching')`)
	b2.run("type again in the second tab", chromedp.Focus(chromedp.CSS(`.xterm-helper-textarea`)), insertText("echo two-$((1+1))"), chromedp.KeyEvent("\r"))
	b2.waitJS("the second viewer typing", `document.querySelector('.term-wrap .muted').textContent === 'you are typing'`)
	b.waitJS("the second viewer's command in the first", `document.querySelector('.xterm-rows').textContent.includes('two-2')`)
	if screen := evalJS[string](b, `document.querySelector('.xterm-rows').textContent`); strings.Contains(screen, "xecho") {
		t.Errorf("the key refused to the second viewer reached the shell: %q", screen)
	}
	b2.shot("terminal-second-viewer")
	closeTab2()

	// Dark, the same session reads as well.
	b.run("dark", darkMode(), chromedp.Navigate(d.client.BaseURL+"/#/s/"+id))
	b.waitJS("the first session, dark", `document.querySelector('.turn-foot')`)
	b.shot("dark-session")

	// Close the flood session, discarding its work: the dialog says what goes.
	b.run("open the flood session again", chromedp.Navigate(d.client.BaseURL+"/#/s/"+fs.ID))
	b.waitJS("the close button", `document.querySelector('.session h1') && document.querySelector('.session h1').textContent === `+jsString(fs.ID))
	b.run("ask to close", js(`[...document.querySelectorAll('button')].find(x => x.textContent === 'Close session').click()`))
	b.waitJS("the close dialog", `document.querySelector('dialog#confirm').open && document.querySelector('dialog#confirm').textContent.includes(`+jsString(fs.Worktree.Branch)+`)`)
	b.run("choose discard", js(`document.querySelector('dialog#confirm input[value=discard]').click()`))
	b.shot("close-confirm")
	b.run("close", js(`document.querySelector('dialog#confirm button.danger').click()`))
	b.waitJS("back on the list", `location.hash === '#/' && document.querySelectorAll('tr[data-session]').length === 2`)
	if _, err := os.Stat(fs.Worktree.Path); !os.IsNotExist(err) {
		t.Errorf("the discarded session's worktree is still there: %v", err)
	}

	// Phone-sized, the sessions list still reads.
	b.run("phone size", chromedp.EmulateViewport(390, 800), chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.waitJS("the sessions table", `document.querySelectorAll('tr[data-session]').length === 2`)
	overflow := evalJS[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`)
	if overflow {
		t.Error("the sessions page is wider than a phone's screen")
	}
	b.shot("phone-sessions")

	// A used link shows what to do; Log out revokes this page's
	// credential at once and says so.
	b.run("desktop size", chromedp.EmulateViewport(1280, 860), chromedp.Navigate(link))
	b.waitJS("the used-link page", `document.querySelector('h1') && document.querySelector('h1').textContent.includes('already used') && document.querySelector('pre')`)
	if href := evalJS[string](b, `location.href`); strings.Contains(href, "code=") {
		t.Errorf("the used link's code stayed in the address bar: %s", href)
	}
	b.shot("login-link-used")
	b.run("back to the page", chromedp.Navigate(d.client.BaseURL+"/#/"))
	b.waitJS("the log out button", `!document.getElementById('logout').hidden`)
	if pages, err := d.client.PageSessions(context.Background()); err != nil || len(pages) != 1 {
		t.Fatalf("PageSessions() before the logout = %+v, %v; want this page", pages, err)
	}
	b.run("log out", js(`document.getElementById('logout').click()`))
	b.waitJS("the logged-out page", `document.querySelector('.login h1') && document.querySelector('.login h1').textContent === 'Logged out'`)
	b.shot("logged-out")
	if left := evalJS[string](b, storedLoginJS, chromedp.EvalAwaitPromise); left != "null" {
		t.Errorf("after logout IndexedDB still holds %s", left)
	}
	if pages, err := d.client.PageSessions(context.Background()); err != nil || len(pages) != 0 {
		t.Errorf("PageSessions() after the logout = %+v, %v; want none (revoked)", pages, err)
	}
	b.run("reload logged out", chromedp.Navigate(d.client.BaseURL+"/"))
	b.waitJS("the login help", `document.querySelector('.login h1') && document.querySelector('.login h1').textContent === 'Log in to agentpool'`)
	b.shot("login-help")
	t.Logf("browser steps took %v", time.Since(start).Round(time.Millisecond))
}

// storedLoginJS evaluates to what IndexedDB holds of the page's login,
// as JSON ("null" if nothing): its id, whether its key is extractable,
// and whether exporting the key failed.
const storedLoginJS = `new Promise((res, rej) => {
  const r = indexedDB.open('agentpool');
  r.onerror = () => rej(r.error);
  r.onsuccess = () => {
    const db = r.result;
    if (!db.objectStoreNames.contains('keys')) { db.close(); res('null'); return; }
    const g = db.transaction('keys').objectStore('keys').get('page');
    g.onerror = () => rej(g.error);
    g.onsuccess = async () => {
      const v = g.result;
      db.close();
      if (!v) { res('null'); return; }
      let exported = 'failed';
      try { await crypto.subtle.exportKey('raw', v.key); exported = 'exported'; } catch (e) { /* non-extractable */ }
      res(JSON.stringify({id: v.id, type: String(v.key && v.key.constructor.name), extractable: !!(v.key && v.key.extractable), exported}));
    };
  };
})`

// assertPageLoggedIn checks the page after a login: no code in the
// address bar, no cookie, no token in the page, nothing in localStorage;
// IndexedDB holds the page's id and a key that cannot be exported.
func assertPageLoggedIn(t *testing.T, b *browser, d *daemon) {
	t.Helper()
	href := evalJS[string](b, `location.href`)
	cookie := evalJS[string](b, `document.cookie`)
	storage := evalJS[string](b, `JSON.stringify(Object.assign({}, localStorage, sessionStorage))`)
	html := evalJS[string](b, `document.documentElement.outerHTML`)
	if strings.Contains(href, "code=") || cookie != "" || strings.Contains(storage, httpapi.PageCredentialPrefix) || strings.Contains(storage, httpapi.RunBearerPrefix) ||
		strings.Contains(html, d.client.Token) || strings.Contains(html, httpapi.RunBearerPrefix) || strings.Contains(html, httpapi.PageCredentialPrefix) {
		t.Errorf("after login: url %q, document.cookie %q, storage %s, a token or credential in the page %v; want no code, no cookie, no credential",
			href, cookie, storage, strings.Contains(html, d.client.Token))
	}
	var stored struct {
		ID, Type, Exported string
		Extractable        bool
	}
	raw := evalJS[string](b, storedLoginJS, chromedp.EvalAwaitPromise)
	if err := json.Unmarshal([]byte(raw), &stored); err != nil || stored.ID == "" || stored.Type != "CryptoKey" || stored.Extractable || stored.Exported != "failed" {
		t.Errorf("IndexedDB holds %s; want the page's id and a CryptoKey that cannot be exported", raw)
	}
	pages, err := d.client.PageSessions(context.Background())
	if err != nil || !slices.ContainsFunc(pages, func(p httpapi.PageSession) bool { return p.ID == stored.ID }) {
		t.Errorf("PageSessions() = %+v, %v; want the page's id %s", pages, err, stored.ID)
	}
}

// statusWith is the status of a GET of url with cred as the bearer.
func statusWith(t *testing.T, url, cred string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// pageBearer authenticates l's page to d by challenge, as the web page
// does, and returns its run bearer.
func pageBearer(t *testing.T, d *daemon, l httpapi.Login) string {
	t.Helper()
	b, err := apitest.PageBearer(t.Context(), d.client.HTTP, d.client.BaseURL, l.ID, l.Credential)
	if err != nil {
		t.Fatalf("authenticate page %s: %v", l.ID, err)
	}
	return b
}

// createReq is a session on repo with agent.
func createReq(repo, agent string) pool.CreateRequest {
	return pool.CreateRequest{Repo: repo, Agent: agent}
}

// insertText types text as if from an input method.
func insertText(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: text})
		return err
	})
}

// darkMode makes the page see prefers-color-scheme: dark.
func darkMode() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	})
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// browserLogin logs b in to d's page through a one-time link.
func browserLogin(t *testing.T, b *browser, d *daemon) {
	t.Helper()
	out, err := d.cli("open")
	if err != nil {
		t.Fatalf("agentpool open: %v\n%s", err, out)
	}
	b.run("open the login link", chromedp.Navigate(strings.TrimSpace(out)))
	b.waitJS("the sessions page", `document.querySelector('h1') && document.querySelector('h1').textContent === 'Sessions'`)
}
