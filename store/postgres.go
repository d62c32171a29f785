package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
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

// Errors of a PostgreSQL configuration.
var (
	// ErrPasswordInURL is returned by Open for a PostgreSQL URL or DSN that
	// carries a password: a URL is often on a command line or in a process's
	// environment, which other users or logs may see. The password comes
	// from PGPASSFILE or ~/.pgpass, or from Config.PasswordFile.
	ErrPasswordInURL = errors.New("the store's URL carries a password: give it in ~/.pgpass (or $PGPASSFILE) or in a file only you can read, named by --store-password-file")
	// ErrPasswordFileMode is returned by Open for a PasswordFile that its
	// group or others may read or write.
	ErrPasswordFileMode = errors.New("the password file may be read by group or others (want mode 0600)")
)

// IsPostgresURL reports whether s names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// dsnPassword matches a password keyword in a key=value DSN.
var dsnPassword = regexp.MustCompile(`(^|\s)password\s*=`)

// HasPassword reports whether the PostgreSQL connection string s carries a
// password itself (not from the environment or a password file), which
// Open refuses (see ErrPasswordInURL).
func HasPassword(s string) bool {
	if IsPostgresURL(s) {
		u, err := url.Parse(s)
		if err != nil {
			return strings.Contains(s, "@") // unparsable: be safe
		}
		if _, ok := u.User.Password(); ok {
			return true
		}
		return u.Query().Has("password")
	}
	return dsnPassword.MatchString(s)
}

// readPasswordFile returns the first line of path, a file that only its
// owner may read.
func readPasswordFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("password file %s is mode %04o: %w", path, fi.Mode().Perm(), ErrPasswordFileMode)
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil {
		return "", fmt.Errorf("password file %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", fmt.Errorf("password file %s is empty", path)
	}
	return line, nil
}

// openPostgres opens the database cfg.URL names through pgx's database/sql
// driver, with queries written in the store's one dialect of placeholders
// (? and ?N) rewritten to PostgreSQL's ($N).
func openPostgres(cfg Config) (*sqlx.DB, error) {
	if HasPassword(cfg.URL) {
		return nil, ErrPasswordInURL
	}
	cc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's message may quote the string; it has no password here.
		return nil, fmt.Errorf("parse store URL: %w", err)
	}
	if cfg.PasswordFile != "" {
		pw, err := readPasswordFile(cfg.PasswordFile)
		if err != nil {
			return nil, err
		}
		cc.Password = pw
	}
	db := sql.OpenDB(rebindConnector{stdlib.GetConnector(*cc)})
	return sqlx.NewDb(db, "pgx"), nil
}

// rebindConnector hands out connections that rewrite placeholders.
type rebindConnector struct{ driver.Connector }

// Connect opens a connection.
func (c rebindConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := conn.(*stdlib.Conn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("unexpected pgx connection type %T", conn)
	}
	return rebindConn{pc}, nil
}

// rebindConn is a pgx connection whose statements are rebound (see rebind).
type rebindConn struct{ *stdlib.Conn }

// Prepare prepares query.
func (c rebindConn) Prepare(query string) (driver.Stmt, error) { return c.Conn.Prepare(rebind(query)) }

// PrepareContext prepares query.
func (c rebindConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(ctx, rebind(query))
}

// ExecContext runs query.
func (c rebindConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.ExecContext(ctx, rebind(query), args)
}

// QueryContext runs query.
func (c rebindConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.QueryContext(ctx, rebind(query), args)
}

// rebind rewrites SQLite's placeholders in query to PostgreSQL's: ?N to $N
// and each bare ? to the next $N. Quoted strings, quoted identifiers and
// comments are left alone. A query without ? is returned as it is.
func rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(query[i+1:], c)
			if j < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+j+2])
			i += j + 1
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				b.WriteString(query[i:])
				return b.String()
			}
			b.WriteString(query[i : i+j])
			i += j - 1
		case c == '?':
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			b.WriteByte('$')
			if j > i+1 {
				b.WriteString(query[i+1 : j])
			} else {
				n++
				fmt.Fprint(&b, n)
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
