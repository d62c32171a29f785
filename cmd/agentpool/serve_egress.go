package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/agentpool/agentpool/egress"
	"github.com/agentpool/agentpool/internal/wiring"
)

// egressDir is the directory of the egress proxy's sockets in the home,
// when the home's path leaves room for a socket's name (a unix socket's
// path is at most 107 bytes); otherwise a private directory of the
// system's temporary directory.
const egressDir = "egress"

// maxEgressDir is the longest egress directory path a socket name fits
// after.
const maxEgressDir = 80

// openEgress starts the agents' egress proxy: every confined agent's way
// out of its network namespace, refusing the daemon's own address (ln's).
func (m *Main) openEgress(ln net.Listener, home string) error {
	dir := filepath.Join(home, egressDir)
	if len(dir) > maxEgressDir {
		d, err := os.MkdirTemp("", "agentpool-egress-")
		if err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		dir = d
	} else {
		_ = os.RemoveAll(dir) // sockets of a previous daemon
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
	}
	var deny []netip.AddrPort
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
		deny = append(deny, ap)
	}
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
