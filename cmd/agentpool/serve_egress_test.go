package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestStoreAddrs: the PostgreSQL servers a store names, in a URL or a
// keyword DSN, are refused to agents; unix sockets and SQLite name none.
func TestStoreAddrs(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want []string
	}{
		{"", nil},
		{"postgres://u@127.0.0.1/db", []string{"127.0.0.1:5432"}},
		{"postgresql://u@127.0.0.2:6543,127.0.0.3/db?sslmode=require", []string{"127.0.0.2:6543", "127.0.0.3:5432"}},
		{"postgres://u@localhost:7000/db", []string{"127.0.0.1:7000"}},
		{"postgres:///db?host=/var/run/postgresql", nil},
		{"host=127.0.0.4 port=5433 dbname=x user=u", []string{"127.0.0.4:5433"}},
		{"host=/tmp dbname=x", nil},
	} {
		got := storeAddrs(c.dsn)
		var want []netip.AddrPort
		for _, w := range c.want {
			want = append(want, netip.MustParseAddrPort(w))
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("storeAddrs(%q) = %v; want %v among them", c.dsn, got, w)
			}
		}
		if len(want) == 0 && len(got) != 0 {
			t.Errorf("storeAddrs(%q) = %v; want none", c.dsn, got)
		}
	}
}

// TestSecretFilesUnderSystemDirs: a daemon given a cluster key file under
// a system directory every agent's view shows refuses to start, naming
// it; its secret files elsewhere are protected from every grant.
func TestSecretFilesUnderSystemDirs(t *testing.T) {
	m := &Main{ClusterKeyFile: "/opt/agentpool/cluster.key"}
	if err := m.checkSecretFiles(); err == nil || !strings.Contains(err.Error(), "cluster key /opt/agentpool/cluster.key lies under /opt, which every agent may read") {
		t.Errorf("checkSecretFiles() = %v; want the key under /opt refused", err)
	}
	dir := t.TempDir()
	m = &Main{ClusterKeyFile: dir + "/cluster.key", TLSKey: dir + "/tls.key", StorePasswordFile: dir + "/pw"}
	if err := m.checkSecretFiles(); err != nil {
		t.Errorf("checkSecretFiles() = %v; want nil", err)
	}
	if got := m.secretFiles(); len(got) != 3 {
		t.Errorf("secretFiles() = %v; want the three files", got)
	}
}
