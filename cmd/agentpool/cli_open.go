package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// browserOpener is the program that opens a URL in the user's browser.
const browserOpener = "xdg-open"

// open prints a one-time login link to the daemon's web page, and with
// --browser opens it. The link comes from the daemon (POST
// /v1/login-links, with the token) and works once, for a minute.
func (c *cli) open(ctx context.Context, args []string) error {
	fs := c.flagSet("open", "open [--browser]\n\nPrint a one-time link that logs this browser in to the daemon's web page (it works once, for a minute).")
	browser := fs.Bool("browser", false, "open the link with "+browserOpener+" as well")
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
	cmd := exec.Command(path, link.URL)
	cmd.Stdout, cmd.Stderr = nil, nil
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", browserOpener, err)
	}
	// xdg-open hands the link to the browser; it is not this command's
	// to wait for.
	return cmd.Process.Release()
}

// bannerLogin prints the daemon banner's line with a one-time login link
// to the web page.
func (m *Main) bannerLogin(addr, self string) {
	link, err := m.api.NewLoginLink("http://" + loopbackAddr(addr))
	if err != nil {
		return
	}
	fmt.Fprintf(m.Stdout, "\nWeb page (the link logs in once, within a minute; '%s open' prints a new one):\n  %s\n", self, link.URL)
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
