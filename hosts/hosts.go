// Package hosts keeps the record of the daemons that share agentpool's
// store: each registers itself and heartbeats (its advertised address,
// its capacity, the providers it can run, its warm agents and open
// sessions), and any of them lists them all with the age of their last
// heartbeat. On SQLite there is one host, the daemon itself; on a shared
// PostgreSQL database, every host of the cluster.
package hosts

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultInterval is how often a daemon heartbeats.
const DefaultInterval = 2 * time.Second

// aliveBeats is how many heartbeats a host may miss and still count as
// alive.
const aliveBeats = 3

// Host is a daemon of the pool as it last heartbeat.
type Host struct {
	ID string `json:"id"`
	// Advertise is the URL other hosts and clients reach it at.
	Advertise string `json:"advertise"`
	// Capacity is how many agents it keeps warm at most (its max_warm).
	Capacity int `json:"capacity"`
	// Providers are the ids of the providers it can run now.
	Providers []string `json:"providers"`
	// Warm and Sessions are its warm agents and open sessions.
	Warm     int `json:"warm"`
	Sessions int `json:"sessions"`
	// Version is its build's version.
	Version     string    `json:"version,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// TokenSHA256 is the hex SHA-256 of the host's user API token, so
	// that any host can accept a token another host issued. It is never
	// shown.
	TokenSHA256 string `json:"-"`
}

// Status is a host as GET /v1/hosts lists it.
type Status struct {
	Host
	// HeartbeatAgeMS is how long ago its last heartbeat was.
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
	// Alive says it heartbeat within its last few intervals.
	Alive bool `json:"alive"`
	// Self marks the daemon that answers.
	Self bool `json:"self,omitempty"`
}

// Store is where heartbeats go.
type Store interface {
	PutHost(ctx context.Context, h Host) error
	ListHosts(ctx context.Context) ([]Host, error)
	RemoveHost(ctx context.Context, id string) error
}

// Config configures a Heartbeat.
type Config struct {
	Store Store
	// ID names the host (see LoadID).
	ID string
	// Advertise is the URL the host is reached at.
	Advertise string
	// Capacity is its max_warm.
	Capacity int
	// Version is its build's version.
	Version string
	// TokenSHA256 is the hex SHA-256 of its user API token (see
	// Host.TokenSHA256).
	TokenSHA256 string
	// Providers lists the providers it can run now; Load its warm agents
	// and open sessions. Both are called at each heartbeat.
	Providers func() []string
	Load      func() (warm, sessions int)
	// Draining, when set and true, makes the heartbeat say capacity 0: a
	// draining host takes no new sessions.
	Draining func() bool
	// Interval is how often it heartbeats (default DefaultInterval).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives failed heartbeats (default slog.Default()).
	Logger *slog.Logger
}

// Heartbeat registers one host and keeps its record current.
type Heartbeat struct {
	cfg     Config
	started time.Time
}

// New returns the heartbeat of the host cfg describes; Run starts it.
func New(cfg Config) (*Heartbeat, error) {
	if cfg.Store == nil || cfg.ID == "" {
		return nil, errors.New("hosts: a store and an id are required")
	}
	if err := ValidID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Providers == nil {
		cfg.Providers = func() []string { return nil }
	}
	if cfg.Load == nil {
		cfg.Load = func() (int, int) { return 0, 0 }
	}
	return &Heartbeat{cfg: cfg, started: cfg.Now().UTC()}, nil
}

// ID is the host's id.
func (h *Heartbeat) ID() string { return h.cfg.ID }

// Beat records the host's heartbeat once.
func (h *Heartbeat) Beat(ctx context.Context) error {
	warm, sessions := h.cfg.Load()
	providers := h.cfg.Providers()
	if providers == nil {
		providers = []string{}
	}
	capacity := h.cfg.Capacity
	if h.cfg.Draining != nil && h.cfg.Draining() {
		capacity = 0
	}
	return h.cfg.Store.PutHost(ctx, Host{ID: h.cfg.ID, Advertise: h.cfg.Advertise, Capacity: capacity, Providers: providers,
		Warm: warm, Sessions: sessions, Version: h.cfg.Version, StartedAt: h.started, HeartbeatAt: h.cfg.Now().UTC(), TokenSHA256: h.cfg.TokenSHA256})
}

// Run heartbeats at once and then every Interval until ctx ends, and
// then removes the host's record: a daemon that stops cleanly leaves the
// pool. A failed heartbeat is logged (once until one succeeds again).
func (h *Heartbeat) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		err := h.Beat(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			h.cfg.Logger.Warn("host heartbeat failed", "host", h.cfg.ID, "err", err)
			failing = true
		case err == nil && failing:
			h.cfg.Logger.Info("host heartbeat recovered", "host", h.cfg.ID)
			failing = false
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := h.cfg.Store.RemoveHost(rctx, h.cfg.ID); err != nil {
				h.cfg.Logger.Warn("remove the host's record", "host", h.cfg.ID, "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}

// List returns every host with the age of its heartbeat. The host that
// answers is alive, and shows its load and providers as they are now, not
// as its last heartbeat had them.
func (h *Heartbeat) List(ctx context.Context) ([]Status, error) {
	list, err := h.cfg.Store.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	now := h.cfg.Now()
	out := make([]Status, 0, len(list))
	for _, x := range list {
		age := max(now.Sub(x.HeartbeatAt), 0)
		if x.Providers == nil {
			x.Providers = []string{}
		}
		self := x.ID == h.cfg.ID
		alive := age <= aliveBeats*h.cfg.Interval
		if self {
			x.Warm, x.Sessions = h.cfg.Load()
			if p := h.cfg.Providers(); p != nil {
				x.Providers = p
			}
			alive = true // it answers
		}
		out = append(out, Status{Host: x, HeartbeatAgeMS: age.Milliseconds(), Alive: alive, Self: self})
	}
	return out, nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidID checks a host id: 1 to 63 letters, digits, dots, dashes and
// underscores, starting with a letter or digit.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("hosts: invalid host id %q: use 1 to 63 letters, digits, '.', '-' or '_', starting with a letter or digit", id)
	}
	return nil
}

// LoadID returns the host id kept in file, making one there (0600) on
// first use: the machine's name and a random suffix, so that two daemons
// of one machine (two data directories) are two hosts, and a daemon keeps
// its id across restarts.
func LoadID(file string) (string, error) {
	if b, err := os.ReadFile(file); err == nil {
		id := strings.TrimSpace(string(b))
		if err := ValidID(id); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("hosts: read the host id: %w", err)
	}
	name, _ := os.Hostname()
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name)
	name = strings.Trim(name, "-")
	if len(name) > 40 {
		name = name[:40]
	}
	if name == "" {
		name = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%x", name, b)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", fmt.Errorf("hosts: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadID(file) // another start made it first
	}
	if err != nil {
		return "", fmt.Errorf("hosts: write the host id: %w", err)
	}
	_, werr := f.WriteString(id + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", fmt.Errorf("hosts: write the host id: %w", werr)
	}
	return id, nil
}
