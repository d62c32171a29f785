package main

import (
	"bytes"
	"debug/buildinfo"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionPrintsBuildInformation: `agentpool version` says which
// source it was built from and with which Go, not only "dev".
func TestVersionPrintsBuildInformation(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-11-26T12:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	got := versionText("dev", "", bi)
	for _, want := range []string{"agentpool dev\n", "0123456789abcdef (modified", "2026-11-26T12:00:00Z", "go1.99.1"} {
		if !strings.Contains(got, want) {
			t.Errorf("versionText() = %q; want it to contain %q", got, want)
		}
	}
	tagged := versionText("dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}})
	if !strings.HasPrefix(tagged, "agentpool v1.2.3\n") {
		t.Errorf("versionText() of a module installed at v1.2.3 = %q; want the module's version", tagged)
	}

	// The real binary prints what its build recorded (no revision when
	// built with -buildvcs=false, as GOFLAGS may say).
	bin := agentpoolBinary(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("agentpool version: %v\n%s", err, out)
	}
	recorded, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), recorded.GoVersion) {
		t.Errorf("agentpool version = %q; want the Go version %s", out, recorded.GoVersion)
	}
	for _, s := range recorded.Settings {
		if s.Key == "vcs.revision" && !strings.Contains(string(out), s.Value) {
			t.Errorf("agentpool version = %q; want the revision %s it was built from", out, s.Value)
		}
	}
}

// TestTopLevelHelpListsEverySubcommand: the binary's help names every
// command of each group (session merge was missing).
func TestTopLevelHelpListsEverySubcommand(t *testing.T) {
	help := usage("agentpool")
	line := func(cmd string) string {
		for _, l := range strings.Split(help, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == cmd {
				return l
			}
		}
		t.Errorf("the help has no line for %s:\n%s", cmd, help)
		return ""
	}
	for group, sub := range map[string]string{"session": sessionUsage + configUsage, "providers": providersUsage, "permissions": permissionsUsage} {
		l := line(group)
		for _, s := range strings.Split(strings.TrimRight(sub, "\n"), "\n") {
			name := strings.Fields(s)[0]
			if !regexp.MustCompile(`\b` + name + `\b`).MatchString(l) {
				t.Errorf("the help's line for %s (%q) does not name its command %s", group, l, name)
			}
		}
	}
	e := newCLIEnv(t)
	for _, l := range strings.Split(clientUsage, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if _, _, err := e.run(t, t.Context(), false, false, "", f[0], "--help"); err != nil {
			t.Errorf("%s --help: %v; want every command of the help to run", f[0], err)
		}
	}
}

// TestFlagHelpSpellsDoubleDash: the flag lists spell the flags as the
// usage lines do, --flag.
func TestFlagHelpSpellsDoubleDash(t *testing.T) {
	e := newCLIEnv(t)
	out, _, err := e.run(t, t.Context(), false, false, "", "session", "new", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\n  --agent string\n") || !strings.Contains(out, `(default USD)`) || !strings.Contains(out, "\n  --json\n") {
		t.Errorf("session new --help =\n%s\nwant the flags listed as --agent string, --budget-currency with (default USD), and --json", out)
	}
	if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(out); m != "" {
		t.Errorf("session new --help lists a flag as %q:\n%s", m, out)
	}
	var serveOut bytes.Buffer
	if err := runServe(t.Context(), []string{"--help"}, &serveOut, &serveOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(serveOut.String(), "\n  --addr string\n") || regexp.MustCompile(`(?m)^\s+-[a-z]`).MatchString(serveOut.String()) {
		t.Errorf("serve --help =\n%s\nwant the flags as --addr", serveOut.String())
	}
}

// TestDocsDocumentEnvironment: every AGENTPOOL_* variable the binary
// reads or names in a message is in the README or docs/*.md
// (AGENTPOOL_LISTEN, named by the port-in-use error, was not).
func TestDocsDocumentEnvironment(t *testing.T) {
	var docs []byte
	for _, page := range docPages(t) { // docs_test.go
		docs = append(docs, page...)
	}
	files, _ := os.ReadDir(".")
	re := regexp.MustCompile(`\b(AGENTPOOL_[A-Z_]*[A-Z])\b`)
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			if !bytes.Contains(docs, []byte(m[1])) {
				t.Errorf("%s names %s, which neither the README nor docs/*.md ever does", f.Name(), m[1])
			}
		}
	}
}
