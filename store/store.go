package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sys/unix"
)

// Defaults applied by Open to a Config field left zero (see Config).
const (
	// DefaultBatchSize is the largest number of events in one transaction.
	DefaultBatchSize = 256
	// DefaultFlushInterval is how long the writer waits to fill a batch.
	DefaultFlushInterval = 500 * time.Microsecond
	// DefaultRetryBackoff is the first wait after a failed batch.
	DefaultRetryBackoff = 10 * time.Millisecond
	// DefaultMaxBackoff caps the wait between retries.
	DefaultMaxBackoff = time.Second
	// DefaultQueueLimit bounds the events waiting for the writer.
	DefaultQueueLimit = 1 << 16
	// DefaultQueueBytes bounds the bytes of the events waiting for the
	// writer or being written: 8 MiB, a few tens of milliseconds of the
	// writer's work at the speed of a disk, so that it is never starved,
	// while a flood of big updates holds no more than the size of a
	// session's ring.
	DefaultQueueBytes = 8 << 20
	// DefaultBatchBytes bounds the bytes of the events of one transaction
	// (one event bigger than that goes alone): 1 MiB, a few milliseconds
	// of the writer's work, which is what a light session's write that
	// comes in the middle of a flood waits for (see writeQueued); producers
	// refill the queue meanwhile.
	DefaultBatchBytes = 1 << 20
	// DefaultAppendWait is how long Append waits for room in a full queue.
	DefaultAppendWait = 50 * time.Millisecond
	// DefaultBusyTimeout is SQLite's wait for a lock held elsewhere.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultCloseTimeout bounds Close's last attempts to write.
	DefaultCloseTimeout = 10 * time.Second
	// DefaultLeaseTTL is how long a session's lease lasts unless renewed
	// (see RenewLeases).
	DefaultLeaseTTL = 10 * time.Second
	// readWait bounds how long a read of sessions or turns waits for the
	// writes queued before it (SetActiveAgent, EndTurn) while the writer
	// is healthy; a failing writer (a full disk) is not waited for, and the
	// read may then miss writes that nobody has been told are done.
	readWait = 250 * time.Millisecond
	// maxIdleConns keeps a few opened connections (and their pragmas) around.
	maxIdleConns = 4
)

// Log attribute keys.
const (
	logKeyErr     = "err"
	logKeyPath    = "path"
	logKeyEvents  = "events"
	logKeyAttempt = "attempt"
	logKeyBackoff = "backoff"
	logKeySession = "session"
	logKeySeq     = "seq"
	logKeyDropped = "dropped"
	logKeyWrite   = "write"
	logKeyEngine  = "engine"
)

// Errors returned by the store; callers test them with errors.Is.
var (
	// ErrNotFound is returned when the row asked for, or the session a new
	// row refers to, does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists is returned when a row with the same key already exists.
	ErrExists = errors.New("already exists")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("store closed")
	// ErrLocked is returned by Open when another process has the database
	// open (another agentpool daemon on the same home).
	ErrLocked = errors.New("database in use by another process")
	// ErrBehind is returned by a queued write that found the queue full
	// for longer than AppendWait: the database cannot keep up.
	ErrBehind = errors.New("database writes are behind")
	// ErrFull is returned by a write that failed because the disk holding
	// the database is full (SQLITE_FULL). It wraps syscall.ENOSPC, so that
	// errors.Is(err, syscall.ENOSPC) holds too. The writes queued behind it
	// are retried, and succeed once space returns.
	ErrFull = fmt.Errorf("database or disk is full: %w", syscall.ENOSPC)
)

// Config configures a Store. Zero fields take the Default constants.
type Config struct {
	// Path is the database file; it is created if missing, its directory
	// must exist. With URL set, Path is optional and only places the loss
	// log (Path + ".lost"), which is then this daemon's own.
	Path string
	// URL, when set, runs the store on PostgreSQL: a postgres:// URL or a
	// key=value DSN as libpq reads them, without a password (Open refuses
	// one with ErrPasswordInURL). The password comes from PasswordFile, or
	// else from $PGPASSFILE or ~/.pgpass (or $PGPASSWORD), as libpq does.
	// Several stores (on several hosts) may share the database.
	URL string
	// PasswordFile, with URL, is a file whose first line is the password;
	// Open refuses it when its group or others may read it.
	PasswordFile string
	// MaxConns, with URL, is how many connections the store opens to
	// PostgreSQL at most (0: PostgresConns; at least MinPostgresConns).
	MaxConns int
	// Now is the clock used for every time the store stamps (nil: time.Now).
	Now func() time.Time
	// Logger receives write failures, retries and drops (nil: slog.Default()).
	Logger *slog.Logger
	// BatchSize is the largest number of events committed in one transaction.
	BatchSize int
	// FlushInterval is how long the writer waits for more events before it
	// commits a batch that is not full; a pending Flush cuts the wait short,
	// and a writer that has had nothing to write for FlushInterval or more
	// does not wait (see linger).
	FlushInterval time.Duration
	// RetryBackoff is the first wait after a failed batch; it doubles on each
	// further failure up to MaxBackoff.
	RetryBackoff time.Duration
	// MaxBackoff caps the wait between retries of a failed batch.
	MaxBackoff time.Duration
	// QueueLimit bounds the events waiting for the writer.
	QueueLimit int
	// QueueBytes bounds the bytes of the events (their Data and slots)
	// waiting for the writer or being written: WaitRoom waits while they
	// reach it; Append admits events up to twice it (for producers that
	// waited for room at the same time) before it waits AppendWait.
	QueueBytes int64
	// BatchBytes bounds the bytes of the events committed in one
	// transaction; an event bigger than that is committed alone.
	BatchBytes int64
	// AppendWait is how long Append blocks on a full queue before it drops
	// the event.
	AppendWait time.Duration
	// BusyTimeout is SQLite's busy_timeout: how long a statement waits for a
	// lock held by another connection (SQLite only).
	BusyTimeout time.Duration
	// CloseTimeout bounds how long Close keeps trying to write pending events.
	CloseTimeout time.Duration
	// CheckpointInterval is the least time between two checkpoints, which
	// copy the WAL into the database file, while commits keep coming
	// (SQLite only, as are CheckpointIdle and WALLimit).
	CheckpointInterval time.Duration
	// CheckpointIdle is how long after the last checkpoint the WAL file is
	// folded into the database and truncated, when no commit came since.
	CheckpointIdle time.Duration
	// WALLimit bounds the WAL file, in bytes: the checkpointer truncates
	// it once it holds more than half of this, and the writer waits for
	// that before a transaction that finds it at the limit, so that it
	// holds at most WALLimit and one transaction (a reader holding an old
	// snapshot, which no checkpoint can pass, delays that).
	WALLimit int64

	// HostID names this daemon among those sharing a PostgreSQL
	// database. With it, on PostgreSQL, the store leases sessions to
	// this host and fences every write for a session it does not hold
	// (see Leasing); on SQLite it only stamps the worktrees it records.
	HostID string
	// LeaseTTL is how long a lease lasts unless renewed, by the
	// database's clock.
	LeaseTTL time.Duration

	// trace, when set (by a benchmark), is told of the writer's steps.
	trace traceHook
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	setDefault(&c.BatchSize, DefaultBatchSize)
	setDefault(&c.FlushInterval, DefaultFlushInterval)
	setDefault(&c.RetryBackoff, DefaultRetryBackoff)
	setDefault(&c.MaxBackoff, DefaultMaxBackoff)
	setDefault(&c.QueueLimit, DefaultQueueLimit)
	setDefault(&c.QueueBytes, DefaultQueueBytes)
	setDefault(&c.BatchBytes, DefaultBatchBytes)
	setDefault(&c.AppendWait, DefaultAppendWait)
	setDefault(&c.BusyTimeout, DefaultBusyTimeout)
	setDefault(&c.CloseTimeout, DefaultCloseTimeout)
	setDefault(&c.LeaseTTL, DefaultLeaseTTL)
	setDefault(&c.CheckpointInterval, DefaultCheckpointInterval)
	setDefault(&c.CheckpointIdle, DefaultCheckpointIdle)
	setDefault(&c.WALLimit, DefaultWALLimit)
	if c.MaxBackoff < c.RetryBackoff {
		c.MaxBackoff = c.RetryBackoff
	}
	return c
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Store is agentpool's database, in SQLite or PostgreSQL. Its methods are
// safe for concurrent use.
type Store struct {
	db  *sqlx.DB
	eng engine
	cfg Config
	log *slog.Logger

	ckpt    *checkpointer // copies the WAL into the database off the writer's path
	stmts   stmtCache     // the SQLite writer's statements
	queue   *queue
	prog    progress
	flushes atomic.Int64  // Flush calls waiting: the writer skips lingering
	nudge   chan struct{} // wakes a lingering writer for a Flush
	quit    chan struct{} // closed by Close: drain, then exit
	abandon context.CancelFunc
	wctx    context.Context // the writer's context, cancelled to give up
	done    chan struct{}   // closed when the writer has exited

	// The writer's own (see writeQueued): the slice it takes a batch
	// into; draining is set at Close, when nothing may be left queued.
	batch    []item
	draining bool
	wrote    time.Time // when the writer last finished a take (or the store opened)
	// unknownCommit is, on PostgreSQL, the writer's transaction whose
	// COMMIT went out without an answer coming back, until the server
	// tells whether it committed (see committedTx).
	unknownCommit *unknownCommit
	// allocated holds, on PostgreSQL, the seq the database gave each
	// event of the batch being written (see insertOnce).
	allocated []int64

	// leasing is set on PostgreSQL with a HostID; leases holds the
	// sessions this store holds, with their epochs (see lease.go).
	leasing bool
	leases  heldLeases
	// leaseRun names this run of the host in the leases it holds (see
	// Hold), random at each Open.
	leaseRun string

	closeOnce sync.Once
	closeErr  error
	lock      *os.File // flock'ed beside the database while open
	lossLog   *lossLog // where Close records what it could not write (nil: none)
	lost      losses   // the events given up since Open

	turnSeq   atomic.Int64 // SQLite: the last turn row id handed out (turns.id, internal)
	lastWrite atomic.Int64 // queue position of the newest queued write

	appended, batches, retries, dropped, rejected atomic.Int64
	failing                                       atomic.Bool // the writer's last attempt failed
	full                                          atomic.Bool // ... because the disk is full
}

// Open opens (creating if needed) the database at cfg.Path, or the
// PostgreSQL database at cfg.URL, applies the engine's embedded migrations that are not yet recorded and starts the event writer.
// ctx bounds the opening only.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if cfg.URL != "" {
		return openPostgresStore(ctx, cfg)
	}
	if cfg.Path == "" {
		return nil, errors.New("open store: empty path")
	}
	dsn, err := dataSourceName(cfg.Path, cfg.BusyTimeout)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	lock, err := lockFile(cfg.Path + lockSuffix)
	if err != nil {
		return nil, fmt.Errorf("open store %q: %w", cfg.Path, err)
	}
	log := cfg.Logger.With(logKeyPath, cfg.Path)
	ckpt, err := newCheckpointer(cfg.Path, cfg, log)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("open store %q: %w", cfg.Path, err)
	}
	db := sqlx.NewDb(sql.OpenDB(newConnector(dsn, ckpt.committed)), "sqlite3")
	db.SetMaxIdleConns(maxIdleConns)
	fail := func(err error) (*Store, error) {
		db.Close()
		ckpt.db.Close()
		lock.Close()
		return nil, fmt.Errorf("open store %q: %w", cfg.Path, err)
	}
	if err := checkDB(ctx, db); err != nil {
		return fail(err)
	}
	if err := migrate(ctx, db, migrationFS, cfg.Now); err != nil {
		return fail(err)
	}
	lastTurn, err := lastTurnID(ctx, db)
	if err != nil {
		return fail(err)
	}
	if err := ckpt.start(ctx); err != nil {
		return fail(err)
	}
	s := newStore(db, sqliteEngine, cfg, log)
	s.ckpt, s.lock = ckpt, lock
	s.turnSeq.Store(lastTurn)
	s.openLossLog(ctx)
	go s.run()
	return s, nil
}

// newStore returns a store on db, its writer not started.
func newStore(db *sqlx.DB, eng engine, cfg Config, log *slog.Logger) *Store {
	wctx, abandon := context.WithCancel(context.Background())
	s := &Store{
		db:      db,
		stmts:   stmtCache{db: db},
		eng:     eng,
		cfg:     cfg,
		log:     log,
		queue:   newQueue(cfg.QueueLimit, cfg.BatchSize, cfg.QueueBytes),
		nudge:   make(chan struct{}, 1),
		quit:    make(chan struct{}),
		wctx:    wctx,
		abandon: abandon,
		done:    make(chan struct{}),
		wrote:   cfg.Now(), // a store just opened is not yet quiet
		leasing: eng.postgres && cfg.HostID != "",
		leases:  heldLeases{epochs: map[string]int64{}},
	}
	if s.leasing {
		s.leaseRun = rand.Text()
	}
	s.prog.changed = make(chan struct{})
	return s
}

// dataSourceName returns the mattn/go-sqlite3 DSN for path: a file: URI
// (so that any character of the path survives) carrying the pragmas that
// every new connection applies.
func dataSourceName(path string, busy time.Duration) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolve path %q: %w", path, err)
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_foreign_keys", "on")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}
	return u.String(), nil
}

// checkDB connects and verifies that WAL mode took effect (it cannot on some
// file systems, and the store relies on readers not blocking the writer).
func checkDB(ctx context.Context, db *sqlx.DB) error {
	var mode string
	if err := db.GetContext(ctx, &mode, "PRAGMA journal_mode"); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode is %q, want wal", mode)
	}
	return nil
}

// Close is CloseContext with CloseTimeout as its budget.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
	defer cancel()
	return s.CloseContext(ctx)
}

// CloseContext writes the events still queued, giving up when ctx ends (a
// full disk that stays full) with the loss counted in Stats.Dropped and
// recorded in the loss log, which the next Open reports in the affected
// sessions' histories; it stops the writer and closes the database. Events given up were never delivered
// (delivery follows the commit), and waiting StartTurn calls get ErrClosed.
// It returns an error when closing the database fails or when any event was
// dropped since Open. Appends made after Close are dropped. Calling Close or
// CloseContext again returns the first result.
func (s *Store) CloseContext(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.queue.close()
		close(s.quit)
		select {
		case <-s.done:
		case <-ctx.Done():
			s.abandon()
			<-s.done
		}
		s.abandon()
		var errs []error
		if n := s.dropped.Load(); n > 0 {
			errs = append(errs, fmt.Errorf("close store: %d events dropped since open", n))
		}
		if err := s.recordLosses(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
		if s.ckpt != nil { // SQLite's only
			if err := s.ckpt.close(); err != nil {
				errs = append(errs, fmt.Errorf("close store: checkpointer: %w", err))
			}
		}
		s.stmts.close()
		// The last connection to close folds the WAL into the database.
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
		if s.lock != nil {
			s.lock.Close() // releases the flock
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// openLossLog opens the loss log beside the database and reports the losses
// it holds from the last Close in their sessions' histories (see
// reportLosses), then clears it. A report that cannot be stored now (the
// disk is still full) is kept for the next Close to record again. Without
// a loss log (no room to create it) losses at Close are only logged.
func (s *Store) openLossLog(ctx context.Context) {
	ll, raw, err := openLossLog(s.cfg.Path + lossSuffix)
	if err != nil {
		s.log.Warn("no loss log: events given up at close will only be logged", logKeyErr, err)
		return
	}
	s.lossLog = ll
	if raw == nil {
		return
	}
	n, err := s.reportLosses(ctx, raw)
	if err != nil {
		s.log.Error("report the events lost at the last stop; kept for the next start", logKeyErr, err)
		s.lost.merge(raw)
		return
	}
	s.log.Warn("reported events lost at the last stop in their sessions' histories", "sessions", n)
	if err := ll.write(nil); err != nil {
		s.log.Error("clear the loss log", logKeyErr, err)
	}
}

// recordLosses writes the events given up since Open to the loss log and
// closes it.
func (s *Store) recordLosses() error {
	if s.lossLog == nil {
		return nil
	}
	defer s.lossLog.close()
	rec := s.lost.record(lossLogSize)
	if rec == nil {
		return nil
	}
	if err := s.lossLog.write(rec); err != nil {
		return fmt.Errorf("record lost events for the next start: %w", err)
	}
	return nil
}

// lockSuffix names the lock file beside the database.
const lockSuffix = ".lock"

// lockFile takes an exclusive flock on path (created if missing), which
// lasts until the file is closed or the process ends.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrLocked, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// lastTurnID returns the highest turn row id ever handed out: the table's
// AUTOINCREMENT counter, or its largest id.
func lastTurnID(ctx context.Context, db *sqlx.DB) (int64, error) {
	var last int64
	err := db.GetContext(ctx, &last, `SELECT MAX(
		COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'turns'), 0),
		COALESCE((SELECT MAX(id) FROM turns), 0))`)
	if err != nil {
		return 0, fmt.Errorf("read last turn row id: %w", err)
	}
	return last, nil
}

// enqueue queues w behind every event and write queued before it, and
// returns once it is queued (not written).
func (s *Store) enqueue(w *write) error {
	_, err := s.queue.push(item{w: w}, s.cfg.AppendWait)
	return s.enqueued(w, err)
}

// enqueued finishes enqueue: it maps push's error and, for a queued write,
// moves lastWrite (which the reads wait for) to it.
func (s *Store) enqueued(w *write, err error) error {
	switch {
	case errors.Is(err, errQueueClosed):
		return fmt.Errorf("%s: %w", w.what, ErrClosed)
	case err != nil && s.full.Load():
		// The queue is full because the writer waits for space.
		return fmt.Errorf("%s: %w", w.what, s.waitingFull())
	case err != nil:
		return fmt.Errorf("%s: %w", w.what, ErrBehind)
	}
	pos := s.queue.position()
	for {
		last := s.lastWrite.Load()
		if pos <= last || s.lastWrite.CompareAndSwap(last, pos) {
			return nil
		}
	}
}

// awaitWrites waits until the writes queued before it have settled, so that
// a read sees them; it does not wait for events. It never blocks a read on
// a failing writer: it returns at once while the writer's last attempt
// failed, and after readWait in any case. A read may then miss a queued
// write, but never one that was acknowledged (StartTurn returns after its
// commit, and the events that report a turn's end follow its row).
func (s *Store) awaitWrites(ctx context.Context) error {
	target := s.lastWrite.Load()
	if ok, _ := s.prog.reached(target); ok || s.failing.Load() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	err := s.waitFor(wctx, target)
	if err != nil && ctx.Err() == nil {
		return nil // stale rather than blocked
	}
	return err
}

// fullErr returns err marked with ErrFull, naming the database file, when
// it says the disk is full, else err.
func (s *Store) fullErr(err error) error {
	if !isFull(err) || errors.Is(err, ErrFull) {
		return err
	}
	return &fullError{path: s.diskPath(), err: fmt.Errorf("the disk holding the database %s is full: %w (%w)", s.where(), ErrFull, err)}
}

// waitingFull is the error of a write refused because the writes queued
// before it wait for space on a full disk.
func (s *Store) waitingFull() error {
	return &fullError{path: s.diskPath(), err: fmt.Errorf("the disk holding the database %s is full and the writes queued before this one wait for space: %w",
		s.where(), ErrFull)}
}

// where names the database in messages: its file, or "on the PostgreSQL
// server" (a full disk there is the server's).
func (s *Store) where() string {
	if s.eng.postgres {
		return "on the PostgreSQL server"
	}
	return s.cfg.Path
}

// diskPath is the file the disk full holds, for fullError: none on
// PostgreSQL, whose disk is the server's.
func (s *Store) diskPath() string {
	if s.eng.postgres {
		return ""
	}
	return s.cfg.Path
}

// fullError is a write refused for a full disk; DiskPath names the
// database file, so that the API can name the file system holding it.
type fullError struct {
	path string
	err  error
}

func (e *fullError) Error() string { return e.err.Error() }
func (e *fullError) Unwrap() error { return e.err }

// DiskPath returns the database file the full disk holds.
func (e *fullError) DiskPath() string { return e.path }

// now returns the store's clock reading.
func (s *Store) now() time.Time { return s.cfg.Now() }

// toUnix converts t to the stored form, UTC unix nanoseconds.
func toUnix(t time.Time) int64 { return t.UnixNano() }

// fromUnix converts a stored time back, in UTC.
func fromUnix(n int64) time.Time { return time.Unix(0, n).UTC() }

// fromNullUnix converts a nullable stored time.
func fromNullUnix(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := fromUnix(*n)
	return &t
}

// orNow returns t, or now when t is zero.
func (s *Store) orNow(t time.Time) time.Time {
	if t.IsZero() {
		return s.now()
	}
	return t
}

// nullID stores 0 as NULL, for optional references such as a turn number.
func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

// nullText stores empty JSON as NULL.
func nullText(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// mapWriteErr turns the errors of a write into the store's sentinels: a
// duplicate key into ErrExists, a missing referenced row into ErrNotFound, a
// full disk into ErrFull.
func (s *Store) mapWriteErr(err error) error {
	if isFull(err) {
		return s.fullErr(err)
	}
	if errors.Is(err, errNoSession) {
		return fmt.Errorf("%w: referenced session: %w", ErrNotFound, err)
	}
	switch constraintOf(err) {
	case constraintUnique:
		return fmt.Errorf("%w: %w", ErrExists, err)
	case constraintForeignKey:
		return fmt.Errorf("%w: referenced session: %w", ErrNotFound, err)
	}
	return err
}

// mustAffect returns ErrNotFound when an update touched no row.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
