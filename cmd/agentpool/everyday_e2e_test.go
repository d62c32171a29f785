package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// userEnv is the environment of a user whose home is home, with no
// AGENTPOOL_* or XDG_STATE_HOME variables, plus extra.
func userEnv(home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AGENTPOOL_") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+home), extra...)
}

// runIn runs command (a path, as typed) with args in dir, with env.
func runIn(t *testing.T, dir string, env []string, command string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(command, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// serveIn starts `serve --addr 127.0.0.1:0` in dir with env, and waits for
// daemon.json in wantHome and the banner; the test's end stops it.
func serveIn(t *testing.T, bin, dir, wantHome string, env []string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var info daemonInfo
		b, err := os.ReadFile(filepath.Join(wantHome, daemonFileName))
		if err == nil && json.Unmarshal(b, &info) == nil && info.PID == cmd.Process.Pid && strings.Contains(out.String(), "providers list") {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start with its data in %s:\n%s", wantHome, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The first minutes of a new user, through the built binary: a busy port,
// the banner, hints to paste, and the daemon found from anywhere in the
// tree or in the per-user default.
func TestEndToEndEverydayUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := agentpoolBinary(t)
	root := t.TempDir()
	user := filepath.Join(root, "me")
	project := filepath.Join(user, "src", "project")
	deep := filepath.Join(project, "cmd", "tool")
	other := filepath.Join(user, "notes")
	for _, d := range []string{deep, other, filepath.Join(project, defaultHomeDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e2eRepoAt(t, project, map[string]string{"README.md": "# project\n", ".gitignore": defaultHomeDir + "/\n"})
	env := userEnv(user, e2eGitEnv...)

	t.Run("busy port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		fresh := filepath.Join(root, "fresh")
		out, err := runIn(t, root, append(env, "AGENTPOOL_HOME="+fresh), bin, "serve", "--addr", ln.Addr().String())
		if err == nil || !strings.Contains(out, "port "+port+" ") || !strings.Contains(out, "--addr 127.0.0.1:PORT") {
			t.Errorf("serve on a busy port = %v:\n%s\nwant a failure naming port %s and --addr", err, out, port)
		}
		if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("serve on a busy port created its data directory %s (stat error %v)", fresh, err)
		}
	})

	// serve and the client both take the nearest .agentpool upward.
	banner := serveIn(t, bin, deep, filepath.Join(project, defaultHomeDir), env)
	t.Run("banner", func(t *testing.T) {
		for _, want := range []string{
			"data:      " + filepath.Join(project, defaultHomeDir),
			"ready:         demo",
			"Open a session on this repository",
			bin + " session new --repo " + project,
			bin + " providers list",
			"enabled by default",
		} {
			if !strings.Contains(banner.String(), want) {
				t.Errorf("banner lacks %q:\n%s", want, banner)
			}
		}
		if strings.Contains(banner.String(), "by editing") {
			t.Errorf("banner still says to enable agents by editing providers.json:\n%s", banner)
		}
		// A banner often goes to a log file others may read: it names the
		// command that prints a login link, never a link with a live code.
		if strings.Contains(banner.String(), "#code=") || !strings.Contains(banner.String(), bin+" open' prints") {
			t.Errorf("banner holds a login code, or does not name '%s open':\n%s", bin, banner)
		}
	})

	t.Run("same port, same home", func(t *testing.T) {
		d, err := readDaemonFile(filepath.Join(project, defaultHomeDir))
		if err != nil {
			t.Fatal(err)
		}
		out, err := runIn(t, deep, env, bin, "serve", "--addr", d.Addr)
		if err == nil || !strings.Contains(out, "the daemon of this data directory") || !strings.Contains(out, "pid "+strconv.Itoa(d.PID)) {
			t.Errorf("a second serve on the same home and port = %v:\n%s\nwant it to name the running daemon", err, out)
		}
	})

	t.Run("hints as invoked", func(t *testing.T) {
		// Run as "./agentpool" from the binary's directory, with the data
		// directory given: every hint must be pasteable as it is.
		out, err := runIn(t, filepath.Dir(bin), append(env, "AGENTPOOL_HOME="+filepath.Join(project, defaultHomeDir)),
			"./agentpool", "session", "new", "--repo", project)
		if err != nil || !strings.Contains(out, `Next: ./agentpool prompt `) {
			t.Errorf("./agentpool session new = %v:\n%s\nwant the next step as ./agentpool", err, out)
		}
		out, _ = runIn(t, filepath.Dir(bin), env, "./agentpool")
		if !strings.Contains(out, "Usage:\n  ./agentpool <command>") {
			t.Errorf("./agentpool without arguments:\n%s\nwant the usage as ./agentpool", out)
		}
	})

	t.Run("client from a subdirectory", func(t *testing.T) {
		out, err := runIn(t, deep, env, bin, "session", "list")
		if err != nil || !regexp.MustCompile(`(?m)^s-`).MatchString(out) {
			t.Errorf("session list from %s = %v:\n%s\nwant the session made above", deep, err, out)
		}
	})

	t.Run("per-user default", func(t *testing.T) {
		state := filepath.Join(root, "state")
		uenv := append(env[:len(env):len(env)], "XDG_STATE_HOME="+state)
		out, err := runIn(t, other, uenv, bin, "ps")
		want := "no daemon found in " + filepath.Join(state, "agentpool") + " (the per-user default"
		if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "start one with: "+bin+" serve") {
			t.Errorf("ps with no daemon = %v:\n%s\nwant %q and the hint", err, out, want)
		}
		serveIn(t, bin, other, filepath.Join(state, "agentpool"), uenv)
		if out, err := runIn(t, other, uenv, bin, "ps"); err != nil {
			t.Errorf("ps against the per-user daemon = %v:\n%s", err, out)
		}
	})
}
