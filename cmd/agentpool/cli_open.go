package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// browserOpener is the program that opens a URL in the user's browser.
const browserOpener = "xdg-open"

// Where open --browser puts the page that hands the login link to the
// browser: a 0700 directory in the data directory (which holds the token
// and which no confined agent may read), else under $XDG_RUNTIME_DIR.
const (
	openDirName = "agentpool-open"
	// openFileTTL is how long such a page is kept: its link is dead by then.
	openFileTTL = 2 * time.Minute
)

// open prints a one-time login link to the daemon's web page, and with
// --browser opens it. The link comes from the daemon (POST
// /v1/login-links, with the token) and works once, for a minute.
func (c *cli) open(ctx context.Context, args []string) error {
	fs := c.flagSet("open", "open [--browser]\n\nPrint a one-time link that logs this browser in to the daemon's web page (it works once, for a minute).")
	browser := fs.Bool("browser", false, "open the link with "+browserOpener+" as well (through a private file: the link never appears on a command line)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	link, err := api.LoginLink(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, link.URL)
	if c.outTTY {
		fmt.Fprintf(c.stderr, "Open this link in your browser; it works once, until %s.\n", link.ExpiresAt.Local().Format(time.TimeOnly))
	}
	if !*browser {
		return nil
	}
	path, err := exec.LookPath(browserOpener)
	if err != nil {
		return fmt.Errorf("cannot open a browser (%s not found): open the link above by hand", browserOpener)
	}
	// Every local user can read a process's command line (/proc/PID/cmdline):
	// the opener gets the path of a 0600 page that redirects to the link.
	page, err := c.writeLoginPage(link.URL)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, page)
	cmd.Stdout, cmd.Stderr = nil, nil
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		_ = os.Remove(page)
		return fmt.Errorf("run %s: %w", browserOpener, err)
	}
	// xdg-open hands the page to the browser; it is not this command's to
	// wait for. The page is removed by the next run, once its link is dead.
	return cmd.Process.Release()
}

// writeLoginPage writes a page (mode 0600, in a 0700 directory of the
// user's) that sends the browser to link, and returns its path. It first
// removes the pages of earlier runs whose links are dead.
func (c *cli) writeLoginPage(link string) (string, error) {
	base := c.env.Home
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = os.Getenv("XDG_RUNTIME_DIR")
	}
	if abs, err := filepath.Abs(base); err == nil && base != "" {
		base = abs
	}
	if base == "" || !filepath.IsAbs(base) {
		return "", errors.New("no private directory for the login page (no data directory, no $XDG_RUNTIME_DIR): open the link above by hand")
	}
	dir := filepath.Join(base, openDirName)
	if err := privateDir(dir); err != nil {
		return "", err
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), "login-") && time.Since(fi.ModTime()) > openFileTTL {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	f, err := os.CreateTemp(dir, "login-*.html") // mode 0600
	if err != nil {
		return "", fmt.Errorf("write the login page: %w", err)
	}
	u := html.EscapeString(link)
	_, werr := fmt.Fprintf(f, `<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url=%s"><title>agentpool: logging in</title>
<p>Opening the agentpool page… <a href="%s">continue</a></p>
`, u, u)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write the login page: %w", werr)
	}
	return f.Name(), nil
}

// privateDir makes dir a directory of this user's that no one else may
// enter (0700), refusing a symlink or another user's directory.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s is not a directory of this user's: remove it", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("chmod %s: %w", dir, err)
		}
	}
	return nil
}

// bannerLogin prints the daemon banner's lines on the web page: its
// address and the command that prints a login link. The banner holds no
// link with a live code: it often goes to a log file that others may
// read (serve > daemon.log under umask 022), and a code in it is a page
// credential for whoever reads it first.
func (m *Main) bannerLogin(addr, self string) {
	fmt.Fprintf(m.Stdout, "\nWeb page: http://%s/ (log in with the one-time link that '%s open' prints, or '%s open --browser')\n",
		loopbackAddr(addr), self, self)
}

// loopbackAddr is addr with an unspecified host (0.0.0.0, ::) replaced by
// 127.0.0.1, for a link a browser on this machine can open.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
