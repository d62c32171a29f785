package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/agentpool/agentpool/store/postgres"
)

//go:embed migrations_pg/*.sql
var postgresFiles embed.FS

// postgresMigrations holds PostgreSQL's migrations as migrations/NNNN_name.sql,
// numbered as SQLite's.
var postgresMigrations fs.FS = renamedDir{fsys: postgresFiles, dir: "migrations_pg", as: "migrations"}

// renamedDir shows the directory dir of fsys under the name as.
type renamedDir struct {
	fsys    fs.FS
	dir, as string
}

// Open opens name, read in dir when it is in as.
func (r renamedDir) Open(name string) (fs.File, error) {
	if name == r.as {
		name = r.dir
	} else if rest, ok := strings.CutPrefix(name, r.as+"/"); ok {
		name = r.dir + "/" + rest
	}
	return r.fsys.Open(name)
}

// Errors of a PostgreSQL configuration (see Config.URL).
var (
	// ErrPasswordInURL is returned by Open for a URL or DSN that carries a
	// password.
	ErrPasswordInURL = postgres.ErrPasswordInURL
	// ErrPasswordFileMode is returned by Open for a PasswordFile that its
	// group or others may read.
	ErrPasswordFileMode = postgres.ErrPasswordFileMode
)

// IsPostgresURL reports whether s names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsPostgresURL(s string) bool { return postgres.IsURL(s) }

// HasPassword reports whether the PostgreSQL connection string s carries a
// password itself, which Open refuses (see ErrPasswordInURL).
func HasPassword(s string) bool { return postgres.HasPassword(s) }

// PostgresConns is how many connections a daemon opens to PostgreSQL at
// most by default (Config.MaxConns), and keeps open while they are used.
// Each PostgreSQL connection is a server process: a daemon that opened
// one per concurrent query and closed all but a few afterwards made the
// server start and end hundreds of processes a second under load (half
// its CPU, the writer's transactions waiting behind them), and a burst of
// requests on three hosts ran past the server's max_connections. A cluster of N hosts needs
// max_connections of at least N × PostgresConns plus what else connects.
const PostgresConns = 16

// MinPostgresConns is the fewest connections Config.MaxConns may allow:
// the writer's transaction holds one, and the reads and fenced writes
// that wait for it need others.
const MinPostgresConns = 4

// postgresConnIdle closes a connection unused for that long.
const postgresConnIdle = time.Minute

// openPostgres opens the database cfg.URL names (see package postgres).
func openPostgres(cfg Config) (*sqlx.DB, error) {
	pc := postgres.Config{URL: cfg.URL, PasswordFile: cfg.PasswordFile}
	if cfg.HostID != "" {
		// A host frozen mid-transaction must not keep its sessions' rows
		// locked past its leases (see TakeOver).
		pc.IdleInTransaction = max(cfg.LeaseTTL/2, time.Second)
	}
	db, err := postgres.Open(pc)
	if err != nil {
		return nil, err
	}
	return sqlx.NewDb(db, "pgx"), nil
}

// openPostgresStore is Open on PostgreSQL (cfg.URL): no file lock (several
// daemons may share the database), no checkpointer, and turn ids and event
// seqs allocated by the database (see migrations_pg/0001_init.sql).
func openPostgresStore(ctx context.Context, cfg Config) (*Store, error) {
	conns := cfg.MaxConns
	switch {
	case conns == 0:
		conns = PostgresConns
	case conns < MinPostgresConns:
		return nil, fmt.Errorf("open store on postgres: %d connections are too few: at least %d", conns, MinPostgresConns)
	}
	db, err := openPostgres(cfg)
	if err != nil {
		return nil, fmt.Errorf("open store on postgres: %w", err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(postgresConnIdle)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store on postgres: %w", err)
	}
	if err := migrateOn(ctx, postgresEngine, db, postgresMigrations, cfg.Now); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store on postgres: %w", err)
	}
	s := newStore(db, postgresEngine, cfg, cfg.Logger.With(logKeyEngine, postgresEngine.name()))
	if cfg.Path != "" {
		s.openLossLog(ctx)
	}
	go s.run()
	return s, nil
}
