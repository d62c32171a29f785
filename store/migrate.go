package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/agentpool/agentpool/store/postgres"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one schema change, named NNNN_what.sql.
type migration struct {
	version int64
	name    string
	sql     string
}

// migrate applies, in version order, the migrations in fsys (files
// migrations/NNNN_name.sql) that schema_migrations does not record yet. Each
// runs in its own immediate transaction together with its record, so a
// failure leaves it unapplied and two processes opening the same file at once
// apply it once.
func migrate(ctx context.Context, db *sqlx.DB, fsys fs.FS, now func() time.Time) error {
	return migrateOn(ctx, sqliteEngine, db, fsys, now)
}

// migrateOn is migrate on engine e. On PostgreSQL, each migration's
// transaction locks schema_migrations first, so that hosts starting at
// once apply each migration once, one after the other.
func migrateOn(ctx context.Context, e engine, db *sqlx.DB, fsys fs.FS, now func() time.Time) error {
	migs, err := readMigrations(fsys)
	if err != nil {
		return err
	}
	create := `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`
	if e.postgres {
		create = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at BIGINT NOT NULL
	)`
	}
	if _, err := db.ExecContext(ctx, create); err != nil && !(e.postgres && createRace(err)) {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, m := range migs {
		if err := applyMigration(ctx, e, db, m, now); err != nil {
			return err
		}
	}
	return nil
}

func applyMigration(ctx context.Context, e engine, db *sqlx.DB, m migration, now func() time.Time) (err error) {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: begin: %w", m.name, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if e.postgres {
		if _, err := tx.ExecContext(ctx, `LOCK TABLE schema_migrations IN EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("migration %s: lock: %w", m.name, err)
		}
	}
	var n int
	if err := tx.GetContext(ctx, &n, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.version); err != nil {
		return fmt.Errorf("migration %s: check: %w", m.name, err)
	}
	if n > 0 {
		return tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, toUnix(now())); err != nil {
		return fmt.Errorf("migration %s: record: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.name, err)
	}
	return nil
}

// readMigrations lists migrations/*.sql in fsys sorted by version; a name
// without a numeric prefix or a repeated version is an error.
func readMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	migs := make([]migration, 0, len(names))
	seen := make(map[int64]string, len(names))
	for _, name := range names {
		base := path.Base(name)
		prefix, _, _ := strings.Cut(base, "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number", base)
		}
		if other, ok := seen[v]; ok {
			return nil, fmt.Errorf("migration %s: version %d already used by %s", base, v, other)
		}
		seen[v] = base
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		migs = append(migs, migration{version: v, name: base, sql: string(body)})
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].version < migs[j].version })
	return migs, nil
}

// createRace reports whether err is PostgreSQL's answer to a CREATE TABLE
// IF NOT EXISTS that another host ran at the same moment: the table is
// there all the same.
func createRace(err error) bool {
	switch pgCode(err) {
	case postgres.UniqueViolation, postgres.DuplicateTable:
		return true
	}
	return false
}
