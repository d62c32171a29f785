package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/agentpool/agentpool/backends"
)

// The loss log records, at Close, the events the store could not write (a
// disk that stayed full), so that the next Open reports them in each
// affected session's history. It is a file of lossLogSize bytes beside the
// database, written full of zeros when the store opens: at Close it is
// overwritten in place, which needs no new block of the file system, so the
// record survives the very full disk that caused the loss (a new file, the
// database or its WAL would each need space that is not there). A record
// that does not fit keeps its sessions with the most losses and counts the
// rest.
const (
	lossSuffix  = ".lost"
	lossLogSize = 8 << 10
	// maxLostTurns bounds the turns listed per session in a record.
	maxLostTurns = 8
)

// lostMessage is the text of the error event that reports a loss.
const lostMessage = "%d events could not be stored: the disk was full when the daemon stopped, and they are missing from this history (they had seq %d to %d)"

// sessionLoss is what one session lost.
type sessionLoss struct {
	Session string  `json:"session"`
	Count   int64   `json:"count"`
	FromSeq int64   `json:"from_seq"`
	ToSeq   int64   `json:"to_seq"`
	Turns   []int64 `json:"turns,omitempty"`
}

// lossRecord is the content of the loss log.
type lossRecord struct {
	Sessions []sessionLoss `json:"sessions"`
	// Omitted counts the events of sessions left out for room.
	Omitted int64 `json:"omitted,omitempty"`
}

// losses collects the events given up, per session, until Close records them.
type losses struct {
	mu  sync.Mutex
	per map[string]*sessionLoss
}

// add counts ev as lost.
func (l *losses) add(ev backends.Event) {
	if ev.Session == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per == nil {
		l.per = map[string]*sessionLoss{}
	}
	sl := l.per[ev.Session]
	if sl == nil {
		sl = &sessionLoss{Session: ev.Session, FromSeq: ev.Seq, ToSeq: ev.Seq}
		l.per[ev.Session] = sl
	}
	sl.Count++
	sl.FromSeq, sl.ToSeq = min(sl.FromSeq, ev.Seq), max(sl.ToSeq, ev.Seq)
	if ev.Turn != 0 && !slices.Contains(sl.Turns, ev.Turn) && len(sl.Turns) < maxLostTurns {
		sl.Turns = append(sl.Turns, ev.Turn)
	}
}

// merge adds the losses of an earlier record not yet reported.
func (l *losses) merge(raw []byte) {
	var rec lossRecord
	if json.Unmarshal(raw, &rec) != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.per == nil {
		l.per = map[string]*sessionLoss{}
	}
	for _, old := range rec.Sessions {
		sl := l.per[old.Session]
		if sl == nil {
			c := old
			l.per[old.Session] = &c
			continue
		}
		sl.Count += old.Count
		sl.FromSeq, sl.ToSeq = min(sl.FromSeq, old.FromSeq), max(sl.ToSeq, old.ToSeq)
	}
}

// record returns the collected losses, sessions with the most first, as
// bytes of at most size, or nil when nothing was lost.
func (l *losses) record(size int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.per) == 0 {
		return nil
	}
	all := make([]sessionLoss, 0, len(l.per))
	for _, sl := range l.per {
		all = append(all, *sl)
	}
	slices.SortFunc(all, func(a, b sessionLoss) int {
		if a.Count != b.Count {
			return int(b.Count - a.Count)
		}
		return bytes.Compare([]byte(a.Session), []byte(b.Session))
	})
	for n := len(all); n >= 0; n-- {
		rec := lossRecord{Sessions: all[:n]}
		for _, sl := range all[n:] {
			rec.Omitted += sl.Count
		}
		if b, err := json.Marshal(rec); err == nil && len(b) <= size {
			return b
		}
	}
	return nil
}

// lossLog is the open loss log file.
type lossLog struct {
	f *os.File
}

// openLossLog opens the loss log at path, creating it full of zeros when
// it is missing or short, and returns it with the record it holds (nil
// when empty). Without room to create it the store runs without one.
func openLossLog(path string) (*lossLog, []byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open loss log: %w", err)
	}
	buf := make([]byte, lossLogSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && n < lossLogSize && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, nil, fmt.Errorf("read loss log: %w", err)
	}
	rec := bytes.TrimRight(buf[:n], "\x00")
	if n < lossLogSize {
		// Write the whole file, zeros after what it held, so that each of
		// its blocks is allocated now.
		if _, err := f.WriteAt(buf[:lossLogSize][n:], int64(n)); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("allocate loss log: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("allocate loss log: %w", err)
		}
	}
	if len(rec) == 0 {
		rec = nil
	}
	return &lossLog{f: f}, slices.Clone(rec), nil
}

// write overwrites the log with rec, zero-padded to its size, in place.
func (l *lossLog) write(rec []byte) error {
	buf := make([]byte, lossLogSize)
	copy(buf, rec)
	if _, err := l.f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("write loss log: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync loss log: %w", err)
	}
	return nil
}

// close closes the file.
func (l *lossLog) close() error { return l.f.Close() }

// reportLosses stores, for each session of rec (a loss log's content), an
// error event saying how many events could not be stored, after the
// session's last stored event and the lost seqs (which stay a gap). A session that no longer exists, or that
// already has the report (the log was not cleared after it was stored),
// is skipped. Everything is stored in one transaction.
func (s *Store) reportLosses(ctx context.Context, raw []byte) (int, error) {
	var rec lossRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return 0, fmt.Errorf("read loss record: %w", err)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return 0, s.fullErr(err)
	}
	defer tx.Rollback()
	stored := 0
	now := toUnix(s.now())
	for _, sl := range rec.Sessions {
		var exists bool
		if err := tx.GetContext(ctx, &exists, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?)`, sl.Session); err != nil {
			return 0, fmt.Errorf("report lost events: %w", err)
		}
		if !exists {
			continue
		}
		var done bool
		if err := tx.GetContext(ctx, &done, s.eng.lossReportedSQL(),
			sl.Session, string(backends.EventError), sl.FromSeq, sl.Count); err != nil {
			return 0, fmt.Errorf("report lost events: %w", err)
		}
		if done {
			continue
		}
		data := backends.MustJSON(map[string]any{
			"error": fmt.Sprintf(lostMessage, sl.Count, sl.FromSeq, sl.ToSeq),
			"stage": "store",
			"lost":  sl,
		})
		// After the lost seqs: they were handed out (never to a reader),
		// and a seq is never reused.
		seq, err := s.eng.nextSeqTx(ctx, tx, sl.Session, sl.ToSeq)
		if err != nil {
			return 0, fmt.Errorf("report lost events: %w", s.fullErr(err))
		}
		if _, err := tx.ExecContext(ctx, insertEventSQL, sl.Session, seq, nil, "", string(backends.EventError),
			string(data), now); err != nil {
			return 0, fmt.Errorf("report lost events: %w", s.fullErr(err))
		}
		stored++
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("report lost events: %w", s.fullErr(err))
	}
	if rec.Omitted > 0 {
		s.log.Error("events lost at the last stop in sessions the loss log had no room for", logKeyDropped, rec.Omitted)
	}
	return stored, nil
}
