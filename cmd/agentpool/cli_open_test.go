package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLoopbackAddr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:7420", "127.0.0.1:7420"},
		{"0.0.0.0:7420", "127.0.0.1:7420"},
		{"[::]:7420", "127.0.0.1:7420"},
		{":7420", "127.0.0.1:7420"},
		{"[::1]:7420", "[::1]:7420"},
		{"localhost:1", "localhost:1"},
	}
	for _, tt := range tests {
		if got := loopbackAddr(tt.in); got != tt.want {
			t.Errorf("loopbackAddr(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// fakeOpener puts an xdg-open on a new PATH that records its arguments,
// and the mode and content of the file it is given, in dir/argv,
// dir/mode and dir/page. It returns the PATH.
func fakeOpener(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + shellQuote(filepath.Join(dir, "argv")) + "\n" +
		"stat -c %a \"$1\" > " + shellQuote(filepath.Join(dir, "mode")) + "\n" +
		"cat \"$1\" > " + shellQuote(filepath.Join(dir, "page")) + "\n" +
		"touch " + shellQuote(filepath.Join(dir, "done")) + "\n"
	if err := os.WriteFile(filepath.Join(bin, browserOpener), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin + string(os.PathListSeparator) + os.Getenv("PATH")
}

// `open --browser` never puts the login code on a command line: the
// opener gets the path of a private page that redirects to the link.
func TestOpenBrowserHidesCode(t *testing.T) {
	bin := agentpoolBinary(t)
	home := t.TempDir()
	d := startDaemon(t, bin, home)
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	rec := t.TempDir()
	cmd := exec.Command(bin, "open", "--browser")
	cmd.Env = append(os.Environ(), "AGENTPOOL_HOME="+home, "PATH="+fakeOpener(t, rec))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agentpool open --browser: %v\n%s", err, out)
	}
	link := strings.TrimSpace(string(out))
	_, code, ok := strings.Cut(link, "/login#code=")
	if !ok || code == "" {
		t.Fatalf("agentpool open --browser printed %q; want a login link", link)
	}
	waitFor(t, "the fake xdg-open", func() bool { _, err := os.Stat(filepath.Join(rec, "done")); return err == nil })
	argv, _ := os.ReadFile(filepath.Join(rec, "argv"))
	mode, _ := os.ReadFile(filepath.Join(rec, "mode"))
	page, _ := os.ReadFile(filepath.Join(rec, "page"))
	args := strings.Fields(string(argv))
	if strings.Contains(string(argv), code) || len(args) != 1 || !strings.HasPrefix(args[0], filepath.Join(home, openDirName)+"/") {
		t.Errorf("xdg-open argv = %q; want one path in %s, without the code", argv, filepath.Join(home, openDirName))
	}
	if strings.TrimSpace(string(mode)) != "600" {
		t.Errorf("the page's mode = %q; want 600", mode)
	}
	if !strings.Contains(string(page), `http-equiv="refresh" content="0;url=`+link+`"`) {
		t.Errorf("the page = %q; want a refresh to %s", page, link)
	}
	if fi, err := os.Stat(filepath.Join(home, openDirName)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the page's directory = %v, %v; want mode 0700", fi, err)
	}
}
