package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Defaults of the checkpointer (see Config).
const (
	// DefaultCheckpointInterval is the least time between two checkpoints
	// while commits keep coming.
	DefaultCheckpointInterval = 100 * time.Millisecond
	// DefaultCheckpointIdle is how long after the last commit the WAL file
	// is folded into the database and truncated.
	DefaultCheckpointIdle = time.Second
	// DefaultWALLimit bounds the size of the WAL file.
	DefaultWALLimit = 64 << 20
	// checkpointBusyTimeout is how long the checkpointer's connection waits
	// for a lock: for the writer's transaction to end and, in a checkpoint
	// that resets the WAL, for readers to leave it. The writer waits for a
	// resetting checkpoint, so this bounds that wait too.
	checkpointBusyTimeout = 50 * time.Millisecond
	// restartWAL is the WAL size past which the checkpointer restarts the
	// WAL: SQLite's automatic checkpoint threshold, 1000 pages of 4 KiB.
	restartWAL = 4 << 20
	// catchUpPasses is how many PASSIVE checkpoints catchUp runs at most
	// to bring the frames left to copy down to restartTail.
	catchUpPasses = 8
	// restartTail is the most bytes of frames the last PASSIVE checkpoint
	// before a RESTART may copy: about what the RESTART, which holds the
	// writer, copies.
	restartTail = 1 << 20
	// restartBusy is how long a RESTART checkpoint, holding the writer,
	// waits for readers to leave the WAL.
	restartBusy = 5 * time.Millisecond
	// walFrameHeader is the size of the header of a WAL frame.
	walFrameHeader = 24
)

// Log attribute keys of the checkpointer.
const (
	logKeyMode   = "mode"
	logKeyFrames = "frames"
	logKeyCopied = "copied"
	logKeyBusy   = "busy"
	logKeyTook   = "took"
)

// connector opens the store's connections: SQLite's with the DSN's pragmas
// and automatic checkpoints turned off, so that no commit runs one (the
// checkpointer does, on its own connection); onCommit, when set, is called
// at each commit of a connection.
type connector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func newConnector(dsn string, onCommit func()) *connector {
	return &connector{dsn: dsn, drv: &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			if _, err := c.Exec("PRAGMA wal_autocheckpoint = 0", nil); err != nil {
				return fmt.Errorf("turn automatic checkpoints off: %w", err)
			}
			if onCommit != nil {
				c.RegisterCommitHook(func() int { onCommit(); return 0 })
			}
			return nil
		},
	}}
}

// Connect opens a connection.
func (c *connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }

// Driver returns the SQLite driver.
func (c *connector) Driver() driver.Driver { return c.drv }

// checkpointer copies the WAL into the database file off the writer's
// path: SQLite's automatic checkpoint would run inside the commit that
// crosses its threshold, holding the writer (and every event waiting to be
// delivered) for the time of a copy and two fsyncs. Once the WAL file
// holds restartWAL (SQLite's own threshold), it runs a PASSIVE checkpoint,
// which never blocks the writer, at most every interval while commits
// come. Since such a checkpoint cannot finish while commits keep coming,
// and the WAL is only reused from its start after one that did, it then
// restarts the WAL (see quietRestart), so that the file is reused rather
// than grown; it truncates the file (TRUNCATE) after idle without a
// commit. Those two need the writer to stand still: they hold gate, which
// the writer holds (shared) during each of its transactions, so that the
// writer waits for them on the gate, and they never lose SQLite's lock to
// a writer that takes it again as soon as it lets it go (nor wait in its
// busy handler's coarse sleeps). The writer itself truncates the WAL
// before a transaction when the WAL file has reached limit (the
// checkpointer fell behind), so that the file never holds more than limit
// and one transaction.
type checkpointer struct {
	gate     sync.RWMutex
	db       *sql.DB // its own connection
	wal      string  // the WAL file's path
	log      *slog.Logger
	interval time.Duration
	idle     time.Duration
	limit    int64 // bytes of WAL
	// frameBytes is the size of a WAL frame: a page and its header.
	frameBytes int64
	nudge      chan struct{}
	// quiet is set while a restart catches up: the writer leaves heavy
	// sessions' items queued. resume (cap 1) wakes the writer when it
	// is cleared.
	quiet  atomic.Bool
	resume chan struct{}
	ctx    context.Context // cancelled by close
	stop   context.CancelFunc
	done   chan struct{}
}

// newCheckpointer returns a checkpointer of the database at path, not yet
// started: its committed method is for the connections' commit hooks.
func newCheckpointer(path string, cfg Config, log *slog.Logger) (*checkpointer, error) {
	dsn, err := dataSourceName(path, checkpointBusyTimeout)
	if err != nil {
		return nil, fmt.Errorf("checkpointer: %w", err)
	}
	db := sql.OpenDB(newConnector(dsn, nil))
	db.SetMaxOpenConns(1)
	c := &checkpointer{
		db: db, log: log, interval: cfg.CheckpointInterval, idle: cfg.CheckpointIdle, limit: cfg.WALLimit,
		wal: path + "-wal", nudge: make(chan struct{}, 1), resume: make(chan struct{}, 1), done: make(chan struct{}),
	}
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c, nil
}

// start opens the checkpointer's connection and starts it; ctx bounds the
// opening only. Call close after start, whatever it returns.
func (c *checkpointer) start(ctx context.Context) error {
	var page int64
	if err := c.db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&page); err != nil {
		close(c.done)
		return fmt.Errorf("open checkpointer connection: %w", err)
	}
	c.frameBytes = page + walFrameHeader
	go c.run()
	return nil
}

// committed tells the checkpointer that a transaction is committing.
func (c *checkpointer) committed() { poke(c.nudge) }

// close stops the checkpointer (started or not), cutting short a
// checkpoint waiting for a lock, and closes its connection.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.db.Close()
}

func (c *checkpointer) run() {
	defer close(c.done)
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	var last time.Time // when the last checkpoint ended
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-idle.C:
			c.idleTruncate()
			continue
		case <-c.nudge:
		}
		if wait := c.interval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-c.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		drain(c.nudge) // this checkpoint covers the commits made meanwhile
		idle.Reset(c.idle)
		if c.walSize() < min(restartWAL, c.limit/2) {
			// A small WAL is left to grow, as SQLite's own threshold
			// does: one copy of many commits' pages costs less than
			// many, and the idle truncation folds it in anyway.
			continue
		}
		// No TRUNCATE here, which would hold the writer while it shrinks
		// the file: a WAL file grown past restartWAL is reused from its
		// start, the writer truncates it at limit, and it is truncated
		// when the writes stop.
		if frames, _ := c.checkpoint("PASSIVE"); frames*c.frameBytes > min(restartWAL, c.limit/2) {
			c.quietRestart(frames)
		}
		last = time.Now()
		idle.Reset(c.idle)
	}
}

// quietRestart restarts the WAL after a PASSIVE checkpoint that found
// frames in it, holding the writer as little as it can: the writer is
// asked to leave the heavy sessions' items queued meanwhile (see
// Store.writeQueued), so that the PASSIVE checkpoints that catch up have
// little more to copy and the RESTART that holds the writer copies and
// syncs almost nothing. Light sessions' writes go on all along, but for
// the RESTART itself.
func (c *checkpointer) quietRestart(frames int64) {
	c.quiet.Store(true)
	defer func() {
		c.quiet.Store(false)
		poke(c.resume) // the writer writes what it left queued
	}()
	if c.catchUp(frames) {
		c.restart()
	}
}

// catchUp runs more PASSIVE checkpoints after one that found frames in
// the WAL, each copying what commits added during the one before, until
// one copies few enough (restartTail) that a checkpoint holding the
// writer would copy about as few. It reports whether that came within
// catchUpPasses; not when commits come faster than they are copied (the
// WAL then grows, up to its limit, where the writer truncates it), nor
// when the WAL restarted by itself meanwhile (a writer found it all
// copied), which needs no RESTART.
func (c *checkpointer) catchUp(frames int64) bool {
	for range catchUpPasses {
		if c.ctx.Err() != nil {
			return false
		}
		now, copied := c.checkpoint("PASSIVE")
		if now < frames || copied < now {
			// Restarted, or a reader's snapshot kept frames from being
			// copied (a RESTART would wait for it holding the writer).
			return false
		}
		if (now-frames)*c.frameBytes <= restartTail {
			return true
		}
		frames = now
	}
	return false
}

// restart runs a RESTART checkpoint with the writer held at the gate,
// waiting for readers at most restartBusy: a reader still in the WAL then
// leaves it for the next round rather than hold the writer.
func (c *checkpointer) restart() {
	c.gate.Lock()
	defer c.gate.Unlock()
	conn, err := c.db.Conn(c.ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := conn.ExecContext(c.ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", restartBusy.Milliseconds())); err != nil {
		c.log.Warn("checkpoint failed", logKeyMode, "RESTART", logKeyErr, err)
		return
	}
	defer func() {
		// A connection left with the short timeout is closed instead.
		if _, err := conn.ExecContext(context.WithoutCancel(c.ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", checkpointBusyTimeout.Milliseconds())); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	c.checkpointOn(conn, "RESTART")
}

// exclusive runs a checkpoint in mode, which waits for the writer, with
// the writer held at the gate.
func (c *checkpointer) exclusive(mode string) {
	c.gate.Lock()
	defer c.gate.Unlock()
	c.checkpoint(mode)
}

// idleTruncate folds the WAL into the database and truncates it once
// the writes stopped, then writes the new WAL's first frame itself: the
// first frame written to an empty WAL syncs the WAL's header (SQLite must,
// even with synchronous=NORMAL), and that fsync would otherwise fall on
// the next commit, which after a pause is typically a user's next prompt
// waiting for its turn's row. Its own commit does not count as a write
// (its connection has no commit hook), so an idle store stays idle.
func (c *checkpointer) idleTruncate() {
	c.gate.Lock()
	defer c.gate.Unlock()
	c.checkpoint("TRUNCATE")
	if c.walSize() != 0 {
		return // a reader kept it: the WAL goes on where it is
	}
	// Setting user_version (unused otherwise) to its own value writes
	// the database's first page, one frame.
	var v int64
	err := c.db.QueryRowContext(c.ctx, "PRAGMA user_version").Scan(&v)
	if err == nil {
		_, err = c.db.ExecContext(c.ctx, fmt.Sprintf("PRAGMA user_version = %d", v))
	}
	if err != nil && c.ctx.Err() == nil {
		c.log.Warn("start the WAL after truncating it", logKeyErr, err)
	}
}

// writing is held (shared) by the writer during each transaction: it
// waits while a truncating checkpoint runs, and runs one first when the
// WAL file has reached the limit. It returns the release.
func (c *checkpointer) writing() func() {
	if c.walSize() >= c.limit {
		c.exclusive("TRUNCATE")
	}
	c.gate.RLock()
	return c.gate.RUnlock
}

// walSize returns the size of the WAL file (0 if it cannot tell).
func (c *checkpointer) walSize() int64 {
	fi, err := os.Stat(c.wal)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// checkpoint runs a checkpoint in mode and returns the frames the WAL
// held and how many of them are in the database now (0, 0 on error). One
// that cannot finish (busy: a reader holds an old snapshot) is left to the
// next round.
func (c *checkpointer) checkpoint(mode string) (frames, checkpointed int64) {
	return c.checkpointOn(c.db, mode)
}

// checkpointOn is checkpoint on q, the checkpointer's connection.
func (c *checkpointer) checkpointOn(q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, mode string) (frames, checkpointed int64) {
	var busy int64
	start := time.Now()
	err := q.QueryRowContext(c.ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &checkpointed)
	if err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("checkpoint failed", logKeyMode, mode, logKeyErr, err)
		}
		return 0, 0
	}
	c.log.Debug("checkpoint", logKeyMode, mode, logKeyFrames, frames, logKeyCopied, checkpointed,
		logKeyBusy, busy != 0, logKeyTook, time.Since(start))
	return frames, checkpointed
}
