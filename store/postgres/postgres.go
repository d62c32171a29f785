// Package postgres opens the store's PostgreSQL databases: pgx's
// database/sql driver, connection strings that carry no password (it comes
// from a password file), placeholders written as SQLite's rewritten to
// PostgreSQL's, and the SQLSTATE codes the store maps to its errors.
// The store's queries and its contract stay in package store.
package postgres

import (
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// SQLSTATE codes the store maps.
const (
	UniqueViolation     = "23505"
	ForeignKeyViolation = "23503"
	DiskFull            = "53100"
	DuplicateTable      = "42P07"
	// Classes of errors about the data of one statement.
	ClassIntegrity = "23" // integrity constraint violation
	ClassData      = "22" // data exception (a value too long, out of range, a NUL in text)
)

// Code returns the SQLSTATE in err, or "".
func Code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Errors of a configuration.
var (
	// ErrPasswordInURL is returned by Open for a URL or DSN that carries a
	// password: a URL is often on a command line or in a process's
	// environment, which other users or logs may see. The password comes
	// from PGPASSFILE or ~/.pgpass, or from Config.PasswordFile.
	ErrPasswordInURL = errors.New("the store's URL carries a password: give it in ~/.pgpass (or $PGPASSFILE) or in a file only you can read, named by --store-password-file")
	// ErrPasswordFileMode is returned by Open for a PasswordFile that its
	// group or others may read or write.
	ErrPasswordFileMode = errors.New("the password file may be read by group or others (want mode 0600)")
)

// Config says which database to open.
type Config struct {
	// URL is a postgres:// URL or a key=value DSN, as libpq reads them,
	// without a password.
	URL string
	// PasswordFile, when set, is a file whose first line is the password;
	// otherwise pgx reads $PGPASSFILE or ~/.pgpass (or $PGPASSWORD).
	PasswordFile string
	// IdleInTransaction, when set, makes the server end a transaction of
	// these connections left idle this long (and release its locks): a
	// host that froze mid-transaction must not keep the rows of its
	// sessions locked from the host that takes them over.
	IdleInTransaction time.Duration
}

// IsURL reports whether s is a postgres:// or postgresql:// URL.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// dsnPassword matches a password keyword in a key=value DSN.
var dsnPassword = regexp.MustCompile(`(^|\s)password\s*=`)

// HasPassword reports whether the connection string s carries a password
// itself (not from the environment or a password file).
func HasPassword(s string) bool {
	if IsURL(s) {
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

// ReadPasswordFile returns the first line of path, a file that only its
// owner may read.
func ReadPasswordFile(path string) (string, error) {
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

// Open returns a handle on the database cfg names, through pgx's
// database/sql driver, whose connections rewrite SQLite's placeholders (?
// and ?N) to PostgreSQL's (see Rebind). It does not connect.
func Open(cfg Config) (*sql.DB, error) {
	if HasPassword(cfg.URL) {
		return nil, ErrPasswordInURL
	}
	cc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse store URL: %w", err)
	}
	if cfg.PasswordFile != "" {
		pw, err := ReadPasswordFile(cfg.PasswordFile)
		if err != nil {
			return nil, err
		}
		cc.Password = pw
	}
	if cfg.IdleInTransaction > 0 {
		if cc.RuntimeParams == nil {
			cc.RuntimeParams = map[string]string{}
		}
		cc.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(cfg.IdleInTransaction.Milliseconds())
	}
	return sql.OpenDB(rebindConnector{stdlib.GetConnector(*cc)}), nil
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

// rebindConn is a pgx connection whose statements are rebound (see Rebind).
type rebindConn struct{ *stdlib.Conn }

// Prepare prepares query.
func (c rebindConn) Prepare(query string) (driver.Stmt, error) { return c.Conn.Prepare(Rebind(query)) }

// PrepareContext prepares query.
func (c rebindConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(ctx, Rebind(query))
}

// ExecContext runs query.
func (c rebindConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.ExecContext(ctx, Rebind(query), args)
}

// QueryContext runs query.
func (c rebindConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.QueryContext(ctx, Rebind(query), args)
}

// ResetSession readies the connection for its next use from the pool:
// pgx's own checks (an open transaction, a ping after a second idle), then
// a look at its socket, without waiting, for what a connection idle in the
// pool must not have: the server's end of it (a restart, an administrator,
// a failover) or a message it sent meanwhile (the error that says why it
// ends the connection). Either makes database/sql drop the connection and
// take another, rather than fail the statement it was taken for.
func (c rebindConn) ResetSession(ctx context.Context) error {
	if err := c.Conn.ResetSession(ctx); err != nil {
		return err
	}
	if endedOrSpoke(c.Conn.Conn().PgConn().Conn()) {
		return driver.ErrBadConn
	}
	return nil
}

// endedOrSpoke says whether c, a connection nobody reads, was closed by
// its peer or has bytes waiting, looking at its socket without reading or
// waiting (MSG_PEEK|MSG_DONTWAIT). A connection it cannot look at passes.
func endedOrSpoke(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	bad := false
	var buf [1]byte
	// Control, not Read: pgx may have a reader of its own parked on the
	// socket (its background reader), which holds the read lock until
	// bytes come; the look must not wait for it.
	err = raw.Control(func(fd uintptr) {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		bad = n > 0 || (rerr == nil && n == 0) || (rerr != nil && !errors.Is(rerr, syscall.EAGAIN) && !errors.Is(rerr, syscall.EINTR))
	})
	return bad || err != nil
}

// Rebind rewrites SQLite's placeholders in query to PostgreSQL's: ?N to $N
// and each bare ? to the next $N. Quoted strings, quoted identifiers and
// comments are left alone. A query without ? is returned as it is.
func Rebind(query string) string {
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
				b.WriteString(strconv.Itoa(n))
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// PgxConn returns the pgx connection under dc, a driver connection of a
// handle Open returned (as sql.Conn's Raw gives it), to send statements
// pgx's way (a batch in one round trip) on the connection of a
// transaction in progress.
func PgxConn(dc any) (*pgx.Conn, error) {
	switch c := dc.(type) {
	case rebindConn:
		return c.Conn.Conn(), nil
	case *stdlib.Conn:
		return c.Conn(), nil
	}
	return nil, fmt.Errorf("not a pgx connection: %T", dc)
}
