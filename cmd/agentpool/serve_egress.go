package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentpool/agentpool/backends/sandbox"
	"github.com/agentpool/agentpool/egress"
	"github.com/agentpool/agentpool/internal/wiring"
)

// egressDir is the directory of the egress proxy's sockets in the home,
// when the home's path leaves room for a socket's name (a unix socket's
// path is at most 107 bytes); otherwise a private directory of the
// system's temporary directory named after the home (or, when another
// user holds that name, a random one).
const egressDir = "egress"

// maxEgressDir is the longest egress directory path a socket name fits
// after.
const maxEgressDir = 80

// openEgress starts the agents' egress proxy: every confined agent's way
// out of its network namespace, refusing the daemon's own address (ln's).
func (m *Main) openEgress(ln net.Listener, home string) error {
	dir := filepath.Join(home, egressDir)
	if len(dir) > maxEgressDir {
		// Named after the home, so that the next start removes what a
		// daemon killed left; a name another user took is not used.
		dir = filepath.Join(os.TempDir(), sandbox.TreeName(home)+"-egress")
	}
	_ = os.RemoveAll(dir) // sockets of a previous daemon
	if err := os.Mkdir(dir, 0o700); err != nil {
		d, err := os.MkdirTemp("", "agentpool-egress-")
		if err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		dir = d
	}
	var deny []netip.AddrPort
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
		deny = append(deny, ap)
	}
	// The shared store's server, wherever it is: agents never speak to
	// it, even where a provider's list would allow its address.
	deny = append(deny, storeAddrs(m.Store)...)
	e := &wiring.Egress{Dir: dir}
	p, err := egress.New(egress.Config{Deny: deny, OnRefused: e.Refused, Logger: m.Logger})
	if err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	e.Proxy = p
	m.egress = e
	return nil
}

// closeEgress stops the proxy, ending what agents still had open through
// it, and removes its sockets.
func (m *Main) closeEgress() {
	if m.egress == nil {
		return
	}
	_ = m.egress.Proxy.Close()
	_ = os.RemoveAll(m.egress.Dir)
	m.egress = nil
}

// cutScheme returns a PostgreSQL URL without its scheme.
func cutScheme(dsn string) (string, bool) {
	for _, p := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(dsn, p); ok {
			return rest, true
		}
	}
	return "", false
}

// storeAddrs returns the addresses of the PostgreSQL servers a store URL
// or keyword DSN names (host and port, the hosts' names resolved), none
// for SQLite or what cannot be parsed or resolved.
func storeAddrs(dsn string) []netip.AddrPort {
	if dsn == "" {
		return nil
	}
	var hosts, ports []string
	if rest, ok := cutScheme(dsn); ok {
		// Several hosts ("h1:p1,h2") are no URL to net/url: the hosts
		// are cut out by hand, the query parsed alone.
		authority, query, _ := strings.Cut(rest, "?")
		authority, _, _ = strings.Cut(authority, "/")
		if i := strings.LastIndexByte(authority, '@'); i >= 0 {
			authority = authority[i+1:]
		}
		u := &url.URL{Host: authority, RawQuery: query}
		for _, hp := range strings.Split(u.Host, ",") {
			h, p, err := net.SplitHostPort(hp)
			if err != nil {
				h, p = hp, ""
			}
			hosts, ports = append(hosts, h), append(ports, p)
		}
		if h := u.Query().Get("host"); h != "" {
			hosts, ports = append(hosts, strings.Split(h, ",")...), append(ports, u.Query().Get("port"))
		}
	} else {
		for _, f := range strings.Fields(dsn) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "host", "hostaddr":
				hosts = append(hosts, strings.Split(strings.Trim(v, "'"), ",")...)
			case "port":
				ports = append(ports, strings.Split(strings.Trim(v, "'"), ",")...)
			}
		}
	}
	var out []netip.AddrPort
	for i, h := range hosts {
		if h == "" || strings.HasPrefix(h, "/") {
			continue // a unix socket: not in any agent's view
		}
		port := uint16(5432)
		p := ""
		if i < len(ports) {
			p = ports[i]
		} else if len(ports) == 1 {
			p = ports[0]
		}
		if n, err := strconv.ParseUint(p, 10, 16); err == nil && n > 0 {
			port = uint16(n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", strings.Trim(h, "[]"))
		cancel()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			out = append(out, netip.AddrPortFrom(a.Unmap(), port))
		}
	}
	return out
}

// secretFiles are the files of secrets the daemon was given by path (the
// cluster key, the TLS key, the store's password file), absolute, their
// symlinks resolved too: no agent's grant may expose them.
func (m *Main) secretFiles() []string {
	var out []string
	for _, f := range []string{m.ClusterKeyFile, m.TLSKey, m.StorePasswordFile} {
		if f == "" {
			continue
		}
		if abs, err := filepath.Abs(f); err == nil {
			out = append(out, abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
				out = append(out, real)
			}
		}
	}
	return out
}

// checkSecretFiles refuses to start with a cluster key file that lies
// where every agent's view shows the system read-only (/etc, /opt, /usr,
// ...): an agent of a root daemon runs as root there. (The views hide
// the files there only their owner may read, a TLS key under
// /etc/letsencrypt say, as they were when the daemon started; the
// cluster key, which lets its holder call any host as another, is not
// left to that.)
func (m *Main) checkSecretFiles() error {
	if m.ClusterKeyFile == "" {
		return nil
	}
	files := []string{m.ClusterKeyFile}
	if abs, err := filepath.Abs(m.ClusterKeyFile); err == nil {
		files = append(files, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			files = append(files, real)
		}
	}
	for _, f := range files {
		if d := sandbox.SystemReadable(f); d != "" {
			return fmt.Errorf("cluster key %s lies under %s, which every agent may read: move it to the data directory (%s) or another directory only this user can read",
				m.ClusterKeyFile, d, clusterKeyFileName)
		}
	}
	return nil
}
