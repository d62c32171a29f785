package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Host is a daemon of the pool as it last heartbeat (see PutHost).
type Host struct {
	ID string
	// Advertise is the URL other hosts and clients reach the daemon at.
	Advertise string
	// Capacity is how many agents it keeps warm at most (its max_warm).
	Capacity int
	// Providers are the ids of the providers it can run.
	Providers []string
	// Warm and Sessions are its warm agents and open sessions.
	Warm, Sessions int
	// Version is its build's version.
	Version string
	// StartedAt is when the daemon started; HeartbeatAt its last
	// heartbeat.
	StartedAt, HeartbeatAt time.Time
	// TokenSHA256 is the hex SHA-256 of the host's user API token, so
	// that any host can accept a token another host issued.
	TokenSHA256 string
}

type hostRow struct {
	ID          string `db:"id"`
	Advertise   string `db:"advertise"`
	Capacity    int64  `db:"capacity"`
	Providers   string `db:"providers"`
	Warm        int64  `db:"warm"`
	Sessions    int64  `db:"sessions"`
	Version     string `db:"version"`
	StartedAt   int64  `db:"started_at"`
	HeartbeatAt int64  `db:"heartbeat_at"`
	TokenSHA256 string `db:"token_sha256"`
}

const hostCols = `id, advertise, capacity, providers, warm, sessions, version, started_at, heartbeat_at, token_sha256`

// PutHost records h's heartbeat: its row is made or replaced whole, its
// HeartbeatAt defaulting to now.
func (s *Store) PutHost(ctx context.Context, h Host) error {
	if h.ID == "" {
		return fmt.Errorf("put host: empty id")
	}
	providers := h.Providers
	if providers == nil {
		providers = []string{}
	}
	raw, err := json.Marshal(providers)
	if err != nil {
		return fmt.Errorf("put host %q: %w", h.ID, err)
	}
	row := hostRow{ID: h.ID, Advertise: h.Advertise, Capacity: int64(h.Capacity), Providers: string(raw), Warm: int64(h.Warm),
		Sessions: int64(h.Sessions), Version: h.Version, StartedAt: toUnix(s.orNow(h.StartedAt)), HeartbeatAt: toUnix(s.orNow(h.HeartbeatAt)),
		TokenSHA256: h.TokenSHA256}
	_, err = s.db.NamedExecContext(ctx, `INSERT INTO hosts (`+hostCols+`)
		VALUES (:id, :advertise, :capacity, :providers, :warm, :sessions, :version, :started_at, :heartbeat_at, :token_sha256)
		ON CONFLICT (id) DO UPDATE SET advertise = excluded.advertise, capacity = excluded.capacity,
			providers = excluded.providers, warm = excluded.warm, sessions = excluded.sessions,
			version = excluded.version, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
			token_sha256 = excluded.token_sha256`, row)
	if err != nil {
		return fmt.Errorf("put host %q: %w", h.ID, s.mapWriteErr(err))
	}
	return nil
}

// ListHosts returns every host, by id.
func (s *Store) ListHosts(ctx context.Context) ([]Host, error) {
	var rows []hostRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+hostCols+` FROM hosts ORDER BY id`); err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	out := make([]Host, 0, len(rows))
	for _, r := range rows {
		h := Host{ID: r.ID, Advertise: r.Advertise, Capacity: int(r.Capacity), Warm: int(r.Warm), Sessions: int(r.Sessions),
			Version: r.Version, StartedAt: fromUnix(r.StartedAt), HeartbeatAt: fromUnix(r.HeartbeatAt), TokenSHA256: r.TokenSHA256}
		// Written by PutHost: a value that does not decode lists no
		// provider rather than hide the host.
		_ = json.Unmarshal([]byte(r.Providers), &h.Providers)
		out = append(out, h)
	}
	return out, nil
}

// RemoveHost forgets host id (a host that left the pool); none is no
// error.
func (s *Store) RemoveHost(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM hosts WHERE id = ?`, id); err != nil {
		return fmt.Errorf("remove host %q: %w", id, s.mapWriteErr(err))
	}
	return nil
}
