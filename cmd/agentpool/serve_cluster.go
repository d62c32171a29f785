package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentpool/agentpool/cluster"
	"github.com/agentpool/agentpool/httpapi"
	"github.com/agentpool/agentpool/internal/wiring"
)

// Several hosts on one PostgreSQL store: the daemon holds leases on the
// sessions it owns (see cluster and pool/lease.go), forwards requests for
// the others to their owner, takes over the sessions of hosts that die,
// and with --drain hands its sessions to other hosts when it stops.

// DefaultDrainTimeout bounds a drain (serve --drain): sessions still
// running a turn past it stay here, and are taken over by another host
// once this one's leases expire.
const DefaultDrainTimeout = 2 * time.Minute

// pushWaitBudget bounds the wait, at stop, for the pushes of the last
// checkpoints.
const pushWaitBudget = 30 * time.Second

// clusterKeyEnv names the cluster key file when --cluster-key-file is not
// given.
const clusterKeyEnv = "AGENTPOOL_CLUSTER_KEY_FILE"

// clusterKeyFileName is the cluster key's file in the data directory,
// read when --cluster-key-file is not given.
const clusterKeyFileName = "cluster.key"

// minClusterKey is the shortest cluster key accepted.
const minClusterKey = 32

// readClusterKey reads the cluster credential from path: a file only its
// owner may read (0600 or stricter) holding at least minClusterKey
// characters, the same on every host of the cluster.
func readClusterKey(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("a daemon on a shared PostgreSQL store needs the cluster key that its hosts present to each other: " +
			"give every host the same file, as " + clusterKeyFileName + " in its data directory (where no agent can read it) or with " +
			"--cluster-key-file (or $" + clusterKeyEnv + "), made for example with `umask 077; head -c 32 /dev/urandom | base64 > " + clusterKeyFileName + "`")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("cluster key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("cluster key %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cluster key: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if len(key) < minClusterKey {
		return "", fmt.Errorf("cluster key %s: %d characters; want at least %d", path, len(key), minClusterKey)
	}
	return key, nil
}

// openCluster makes this host's part of the cluster when its store is
// shared (PostgreSQL): nil otherwise.
func (m *Main) openCluster() error {
	if !m.store.Leasing() {
		return nil
	}
	path := m.ClusterKeyFile
	if path == "" {
		// In the data directory, where no agent may read it (see
		// protectedHomes).
		if p := filepath.Join(m.Home, clusterKeyFileName); fileExists(p) {
			path = p
		}
	}
	key, err := readClusterKey(path)
	if err != nil {
		return err
	}
	if err := m.loadClusterTLS(); err != nil {
		return err
	}
	leases := wiring.Leases{S: m.store}
	m.cluster, err = cluster.New(cluster.Config{Self: m.store.HostID(), Store: leases, Hosts: m.hosts, Pool: m.pool,
		Providers: func(agent string) bool { return slices.Contains(m.readyProviders(), agent) },
		Key:       key, TTL: m.store.LeaseTTL(), Logger: m.Logger,
		Claimed: leases.ClaimFence(wiring.Worktrees{M: m.wt, Logger: m.Logger, Ledger: leases, Pushes: m.pushes}),
		// m.api is made before any request is served and Run starts.
		Verify: func(ctx context.Context, h cluster.Host) error {
			return m.api.CheckHost(ctx, httpapi.ClusterHost{ID: h.ID, Advertise: h.Advertise})
		}})
	return err
}

// hostCheckTimeout bounds the check of one host at start.
const hostCheckTimeout = 5 * time.Second

// errWrongClusterKey is the error of a start refused because no host of
// the cluster proves it holds this host's key.
var errWrongClusterKey = errors.New("this host's cluster key is not the cluster's")

// checkHosts asks every other live host, at once, to prove that it holds
// this host's cluster key (httpapi.Server.CheckHost; no key crosses the
// wire), before this host registers. When live hosts answer and none
// proves it, this host is the one started with another key: it refuses
// to join (errWrongClusterKey), before any other host lists it or places
// a session on it. A host that proves nothing while others do is named in
// the log (the cluster does not place sessions on it either).
func (m *Main) checkHosts(ctx context.Context) error {
	list, err := m.hosts.List(ctx)
	if err != nil {
		m.Logger.Warn("list the hosts to check their cluster key", "err", err)
		return nil
	}
	var others []httpapi.ClusterHost
	for _, h := range list {
		if h.Alive && !h.Self && h.ID != m.hosts.ID() {
			others = append(others, httpapi.ClusterHost{ID: h.ID, Advertise: h.Advertise})
		}
	}
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, h := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, hostCheckTimeout)
			defer cancel()
			errs[i] = m.api.CheckHost(hctx, h)
		}()
	}
	wg.Wait()
	var proved, refused []string
	for i, h := range others {
		err := errs[i]
		switch {
		case errors.Is(err, httpapi.ErrHostProof):
			refused = append(refused, h.ID)
			m.Logger.Error(fmt.Sprintf("host %s at %s does not prove it holds this cluster key: started with a different --cluster-key-file?", h.ID, h.Advertise),
				"host", h.ID, "url", h.Advertise, "err", err)
		case err != nil:
			m.Logger.Warn("a host of the cluster did not answer its hello", "host", h.ID, "url", h.Advertise, "err", err)
		default:
			proved = append(proved, h.ID)
			m.Logger.Debug("host proved it holds the cluster key", "host", h.ID, "url", h.Advertise)
		}
	}
	if len(refused) > 0 && len(proved) == 0 {
		return fmt.Errorf("%w: no live host of the cluster proves it holds the key of %s (%s refused the proof): "+
			"give this host the same cluster key file as the others (it is never sent; see --cluster-key-file)",
			errWrongClusterKey, m.clusterKeyPath(), strings.Join(refused, ", "))
	}
	return nil
}

// clusterKeyPath names the cluster key file in messages.
func (m *Main) clusterKeyPath() string {
	if m.ClusterKeyFile != "" {
		return m.ClusterKeyFile
	}
	return filepath.Join(m.Home, clusterKeyFileName)
}

// sha256Hex is the hex SHA-256 of s.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// drain hands this host's sessions to other hosts, for serve --drain,
// within DrainTimeout.
func (m *Main) drain() {
	if m.cluster == nil {
		return
	}
	timeout := m.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	m.Logger.Info("draining: handing every session to other hosts", "timeout", timeout)
	left := m.cluster.Drain(ctx)
	if len(left) > 0 {
		m.Logger.Warn("drain: sessions still here; other hosts take them over once their leases expire", "sessions", left,
			"err", errors.New("drain timed out"))
		return
	}
	m.Logger.Info("drained", "took", time.Since(begin).Round(time.Millisecond))
}

// clusterAPI is what httpapi asks of the cluster: nil alone.
func (m *Main) clusterAPI() httpapi.Cluster {
	if m.cluster == nil {
		return nil
	}
	return wiring.ClusterAPI{C: m.cluster}
}

// loadClusterTLS makes the client TLS config of host-to-host calls:
// the authorities of --cluster-ca, else the system's.
func (m *Main) loadClusterTLS() error {
	if m.ClusterCA == "" {
		return nil
	}
	pem, err := os.ReadFile(m.ClusterCA)
	if err != nil {
		return fmt.Errorf("--cluster-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--cluster-ca %s: no PEM certificate in it", m.ClusterCA)
	}
	m.clusterTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return nil
}

// serveHTTP serves the API on the listener: HTTPS with --tls-cert.
func (m *Main) serveHTTP() error {
	if m.TLSCert != "" {
		return httpapi.ServeTLS(m.http, m.ln, m.TLSCert, m.TLSKey)
	}
	return m.http.Serve(m.ln)
}

// fileExists says whether path names an existing file (not a directory).
func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}
