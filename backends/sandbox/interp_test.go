package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/agenttest"
	"github.com/agentpool/agentpool/backends/sandbox"
)

// touch creates the files (and their directories) under root and returns
// root joined with the first.
func touch(t *testing.T, root string, files ...string) string {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, files[0])
}

func TestPolicyForInterpreterScripts(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	daemon := filepath.Join(home, ".agentpool")
	wt := filepath.Join(daemon, "worktrees", "s1")
	touch(t, root, "bin/node", "bin/python3.12", "bin/uv", "bin/tsx", "bin/java", "home/.agentpool/token", "home/.agentpool/worktrees/s1/rel.py")
	bin := func(name string) string { return filepath.Join(root, "bin", name) }
	cases := []struct {
		name  string
		exe   string
		args  []string
		grant string // a directory granted for reading ("" none)
		file  string // a file granted for reading ("" none)
		not   []string
	}{
		{name: "node package", exe: bin("node"), args: []string{"--enable-source-maps", touch(t, root, "opt/x/node_modules/pkg/bin/agent.mjs")},
			grant: filepath.Join(root, "opt/x/node_modules/pkg"), not: []string{filepath.Join(root, "opt/x")}},
		{name: "node scoped package", exe: bin("node"), args: []string{touch(t, root, "opt/z/node_modules/@scope/pkg/dist/cli.js")},
			grant: filepath.Join(root, "opt/z/node_modules/@scope/pkg")},
		{name: "node preload and script", exe: bin("node"), args: []string{"-r", touch(t, root, "hooks/h.js"), touch(t, root, "srv/n/agent.js")},
			grant: filepath.Join(root, "srv/n")},
		{name: "python script", exe: bin("python3.12"), args: []string{"-u", "-X", "utf8", touch(t, root, "srv/y/agent.py"), "--flag"},
			grant: filepath.Join(root, "srv/y")},
		{name: "python venv", exe: bin("python3.12"), args: []string{touch(t, root, "venv/lib/python3.12/site-packages/ag/main.py", "venv/pyvenv.cfg")},
			grant: filepath.Join(root, "venv")},
		{name: "python module", exe: bin("python3.12"), args: []string{"-m", touch(t, root, "srv/m/agent.py")}, not: []string{filepath.Join(root, "srv/m")}},
		{name: "uv run", exe: bin("uv"), args: []string{"run", "--with", "rich", touch(t, root, "p/x.py")}, grant: filepath.Join(root, "p")},
		{name: "tsx", exe: bin("tsx"), args: []string{touch(t, root, "ts/agent.ts")}, grant: filepath.Join(root, "ts")},
		{name: "java -jar", exe: bin("java"), args: []string{"-Xmx1g", "-jar", touch(t, root, "jar/agent.jar"), touch(t, root, "other/x.txt")},
			grant: filepath.Join(root, "jar"), not: []string{filepath.Join(root, "other")}},
		{name: "relative script in the worktree", exe: bin("python3.12"), args: []string{"rel.py"}, file: filepath.Join(wt, "rel.py")},
		{name: "script directly in the home", exe: bin("python3.12"), args: []string{touch(t, root, "home/agent.py")},
			file: filepath.Join(home, "agent.py"), not: []string{home}},
		{name: "not an interpreter", exe: touch(t, root, "bin/agent"), args: []string{touch(t, root, "cfg/agent.json")}, not: []string{filepath.Join(root, "cfg")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sandbox.PolicyFor(sandbox.PolicyInput{
				Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: wt, Exe: c.exe, Args: c.args, Home: home,
				Protected: []sandbox.Protected{{Path: daemon, What: "the daemon's home"}},
			})
			if c.grant != "" && !slices.Contains(r.Policy.Read, c.grant) {
				t.Errorf("PolicyFor(%q %q).Read = %q; want %s", c.exe, c.args, r.Policy.Read, c.grant)
			}
			if c.file != "" && !slices.Contains(r.Policy.Read, c.file) && !slices.Contains(r.Policy.Write, filepath.Dir(c.file)) {
				t.Errorf("PolicyFor(%q %q).Read = %q; want the file %s", c.exe, c.args, r.Policy.Read, c.file)
			}
			for _, n := range c.not {
				if slices.Contains(r.Policy.Read, n) {
					t.Errorf("PolicyFor(%q %q).Read = %q; want no %s", c.exe, c.args, r.Policy.Read, n)
				}
			}
			if len(r.Notes) > 0 {
				t.Errorf("PolicyFor(%q %q).Notes = %v; want none", c.exe, c.args, r.Notes)
			}
		})
	}
}

func TestPolicyForScriptInTheDaemonHome(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	daemon := filepath.Join(home, ".agentpool")
	script := touch(t, daemon, "agents/agent.py")
	node := touch(t, root, "bin/python3")
	r := sandbox.PolicyFor(sandbox.PolicyInput{
		Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: filepath.Join(daemon, "worktrees", "s1"), Exe: node, Args: []string{script},
		Home: home, Protected: []sandbox.Protected{{Path: daemon, What: "the daemon's home"}},
	})
	for _, p := range r.Policy.Read {
		if strings.HasPrefix(p, daemon) {
			t.Errorf("Read grants %s, in the daemon's home", p)
		}
	}
	if len(r.Notes) != 1 || r.Notes[0].Path != script || !strings.Contains(r.Notes[0].Reason, "inside the daemon's home") {
		t.Fatalf("Notes = %+v; want one naming %s inside the daemon's home", r.Notes, script)
	}
	if !slices.Contains(r.Policy.Check, script) {
		t.Errorf("Check = %q; want the launcher to check %s (and stop, naming it)", r.Policy.Check, script)
	}
}

func TestPolicyForRefusalsSayWhy(t *testing.T) {
	home := "/home/u"
	checkout := home + "/src/repo"
	r := sandbox.PolicyFor(sandbox.PolicyInput{
		Sandbox: backends.SandboxSpec{Enabled: true,
			Read:  []string{"/", home, home + "/.ssh/keys", home + "/.config", checkout + "/docs", "/data"},
			Write: []string{home + "/.agentpool/token", home + "/.tool"}},
		Worktree: home + "/.agentpool/worktrees/r/s1", Home: home, PATH: home + "/bin:/usr/bin",
		Protected: []sandbox.Protected{{Path: home + "/.agentpool", What: "the daemon's home"}, {Path: checkout, What: "the main checkout"}},
	})
	want := map[string]string{
		"/":                        "is the root directory",
		home:                       "is your home directory",
		home + "/.ssh/keys":        "lies inside a secret: ~/.ssh",
		home + "/.config":          "contains a secret: ~/.config/",
		checkout + "/docs":         "lies inside the main checkout " + checkout,
		home + "/.agentpool/token": "lies inside the daemon's home " + home + "/.agentpool",
	}
	got := map[string]backends.SandboxNote{}
	for _, n := range r.Notes {
		got[n.Path] = n
	}
	for path, reason := range want {
		n, ok := got[path]
		switch {
		case !ok:
			t.Errorf("Notes lack %s: %+v", path, r.Notes)
		case !strings.Contains(n.Reason, reason) || n.Fix == "":
			t.Errorf("note of %s = %+v; want the reason %q and a fix", path, n, reason)
		}
	}
	if n := got[home+"/.agentpool/token"]; n.Entry != backends.EntryWrite {
		t.Errorf("note of the token names entry %q; want %q", n.Entry, backends.EntryWrite)
	}
	if n := got[checkout+"/docs"]; n.Entry != backends.EntryRead {
		t.Errorf("note of the checkout names entry %q; want %q", n.Entry, backends.EntryRead)
	}
	if len(r.Notes) != len(want) {
		t.Errorf("Notes = %+v; want only the user's refused entries (%d)", r.Notes, len(want))
	}
	// The derived PATH entry in the home is refused without a note.
	_, dropped := sandbox.BuildPolicy(sandbox.PolicyInput{Home: home, PATH: home + ":/usr/bin"})
	if !slices.Contains(dropped, home) {
		t.Errorf("BuildPolicy dropped %q; want the PATH entry %s", dropped, home)
	}
}

func TestBrowserProfilesAreSecrets(t *testing.T) {
	home := "/home/u"
	paths := []string{".config/chromium", ".config/google-chrome/Default", ".config/BraveSoftware", ".mozilla/firefox",
		"snap/chromium/common/chromium", "snap/firefox/common/.mozilla", ".local/share/keyrings", ".local/share"}
	var read []string
	for _, p := range paths {
		read = append(read, filepath.Join(home, p))
	}
	pol, dropped := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true, Read: read}, Home: home})
	for _, p := range read {
		if slices.Contains(pol.Read, p) || !slices.Contains(dropped, p) {
			t.Errorf("BuildPolicy grants %s (dropped %q); a browser profile or keyring must never be", p, dropped)
		}
	}
}

func TestExplainDeniedPaths(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	touch(t, root, "opt/x/node_modules/pkg/lib/a.js", "srv/conf/agent.toml", "home/.tool/state.json", "home/.agentpool/token", "home/.other/cfg")
	r := sandbox.PolicyFor(sandbox.PolicyInput{
		Sandbox:  backends.SandboxSpec{Enabled: true, Read: []string{home + "/.tool"}, Write: []string{home + "/.cache"}},
		Worktree: filepath.Join(home, ".agentpool", "worktrees", "s1"), Home: home,
		Protected: []sandbox.Protected{{Path: filepath.Join(home, ".agentpool"), What: "the daemon's home"}},
	})
	out := strings.Join([]string{
		`agentpool sandbox: cannot read "` + root + `/srv/conf/agent.toml" under the sandbox (named on the command line)`,
		`Error: EACCES: permission denied, open '` + root + `/opt/x/node_modules/pkg/lib/a.js'`,
		`PermissionError: [Errno 13] Permission denied: '` + home + `/.tool/state.json'`,
		`sh: 1: cannot create ` + home + `/.newtool/log: Permission denied`,
		`cat: ` + home + `/.agentpool/token: Permission denied`,
		`open ` + home + `/.other/cfg: permission denied`,
		`Error: EACCES: permission denied, open '/usr/share/x'`,
	}, "\n")
	got := map[string]backends.SandboxNote{}
	for _, n := range r.Explain(out) {
		got[n.Path] = n
	}
	want := []struct{ path, entry, grant string }{
		{root + "/srv/conf/agent.toml", backends.EntryRead, root + "/srv/conf"},
		{root + "/opt/x/node_modules/pkg/lib/a.js", backends.EntryRead, root + "/opt/x/node_modules/pkg"},
		{home + "/.tool/state.json", backends.EntryWrite, "~/.tool"},
		{home + "/.newtool/log", backends.EntryWrite, "~"},
		{home + "/.other/cfg", backends.EntryRead, "~/.other"},
	}
	for _, w := range want {
		n, ok := got[w.path]
		if !ok {
			t.Errorf("Explain has no note of %s: %+v", w.path, got)
			continue
		}
		if w.grant == "~" {
			// The home cannot be granted: the file itself is.
			w.grant = "~/.newtool/log"
		}
		if n.Entry != w.entry || n.Grant != w.grant || !strings.Contains(n.Fix, w.entry) {
			t.Errorf("Explain note of %s = %+v; want entry %s, grant %s", w.path, n, w.entry, w.grant)
		}
	}
	if n := got[home+"/.agentpool/token"]; n.Grant != "" || !strings.Contains(n.Reason, "cannot be granted") {
		t.Errorf("Explain note of the token = %+v; want that it cannot be granted", n)
	}
	if n, ok := got["/usr/share/x"]; ok {
		t.Errorf("Explain noted %+v, a path the policy grants", n)
	}
}

// TestLauncherChecksTheScript: a file the policy must let the program
// read, but does not, stops the launch with ExitDenied and a line naming
// it; a file named on the command line gets the line, and the program runs.
func TestLauncherChecksTheScript(t *testing.T) {
	agenttest.RequireFeature(t, sandbox.LandlockABI() >= 1, "Landlock")
	m := open(t, sandbox.Config{})
	work := t.TempDir()
	hidden := touch(t, t.TempDir(), "agent.py")
	pol, _ := sandbox.BuildPolicy(sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true}, Worktree: work, Exe: "/bin/sh", PATH: os.Getenv("PATH")})
	pol.Check = []string{hidden}
	tmp := t.TempDir()
	_, cmd, out := startIn(t, m, sandbox.JailConfig{Path: []string{"s1", "agent"}, Policy: &pol, Session: "s1", TmpRoot: tmp}, "echo ran", work)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != sandbox.ExitDenied || strings.Contains(out.String(), "ran") {
		t.Errorf("launch with an unreadable script: exit %d (%v), output %q; want exit %d", code, err, out, sandbox.ExitDenied)
	}
	if want := `cannot read "` + hidden + `" under the sandbox`; !strings.Contains(out.String(), want) {
		t.Errorf("output %q; want %q", out, want)
	}
	pol.Check = nil
	j, err := m.NewJail(sandbox.JailConfig{Path: []string{"s1", "agent2"}, Policy: &pol, Session: "s1", TmpRoot: tmp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Release() })
	cmd = exec.Command("/bin/sh", "-c", `echo ran; cat "$0"`, hidden)
	cmd.Dir = work
	out.Reset()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := j.Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Run(); err == nil {
		t.Errorf("cat of %s under the sandbox succeeded", hidden)
	}
	if !strings.Contains(out.String(), "ran") || !strings.Contains(out.String(), `cannot read "`+hidden+`"`) {
		t.Errorf("output %q; want the program to run and a line naming %s", out, hidden)
	}
}

// BenchmarkPolicyForInterpreter is the cost of a launch's policy for
// "node /opt/x/node_modules/pkg/bin/agent.mjs", script lookup included.
func BenchmarkPolicyForInterpreter(b *testing.B) {
	root := b.TempDir()
	for _, f := range []string{"bin/node", "opt/x/node_modules/pkg/bin/agent.mjs"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#\n"), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	in := sandbox.PolicyInput{Sandbox: backends.SandboxSpec{Enabled: true, Read: []string{"/home/u/.gitconfig"}, Write: []string{"/home/u/.cache"}},
		Worktree: "/home/u/.agentpool/worktrees/s1", Exe: filepath.Join(root, "bin/node"),
		Args: []string{filepath.Join(root, "opt/x/node_modules/pkg/bin/agent.mjs")}, PATH: os.Getenv("PATH"), Home: "/home/u",
		Protected: []sandbox.Protected{{Path: "/home/u/.agentpool", What: "the daemon's home"}}}
	for b.Loop() {
		sandbox.PolicyFor(in)
	}
}
