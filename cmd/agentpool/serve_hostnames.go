package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
)

// allowedHosts are the Host names the daemon answers besides loopback's
// (httpapi.Config.AllowedHosts): the host of --advertise, the DNS and IP
// names of --tls-cert, and the address of --addr (every address of the
// machine's interfaces when it listens on all of them). A client that
// reaches the daemon by any of these names is served; a page that a
// rebound name points at is not.
func (m *Main) allowedHosts() ([]string, error) {
	var out []string
	add := func(h string) {
		h = strings.ToLower(strings.TrimSuffix(strings.Trim(strings.TrimSpace(h), "[]"), "."))
		if h == "" || strings.ContainsAny(h, "/ ") || strings.Count(h, ":") == 1 || slices.Contains(out, h) {
			return
		}
		out = append(out, h)
	}
	if m.Advertise != "" {
		if u, err := url.Parse(m.Advertise); err == nil {
			add(u.Hostname())
		}
	}
	if m.TLSCert != "" {
		names, err := certNames(m.TLSCert)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			add(n)
		}
	}
	host, _, err := net.SplitHostPort(m.Addr)
	if err != nil {
		host = m.Addr
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil && ip.IsUnspecified() {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					add(n.IP.String())
				}
			}
		}
	} else {
		add(host)
	}
	return out, nil
}

// certNames returns the DNS and IP names of the first certificate of the
// PEM file path (wildcard names are left out: the allowed hosts are
// exact).
func certNames(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("--tls-cert %s: no certificate in it", path)
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %w", path, err)
		}
		var out []string
		for _, n := range c.DNSNames {
			if !strings.HasPrefix(n, "*") {
				out = append(out, n)
			}
		}
		for _, ip := range c.IPAddresses {
			out = append(out, ip.String())
		}
		return out, nil
	}
}
