package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// PushedHeld is Pushed read under the lease: it returns what was last
// pushed of session with the epoch this store holds it at, and an error
// wrapping ErrFenced when this store does not hold the session at the
// database's epoch (another host took it over or was handed it). A push
// made with these values carries that epoch as its fence on the remote
// (worktree.Fence), so a host that lost the session pushes nothing of it.
// Without leasing the epoch is 0.
func (s *Store) PushedHeld(ctx context.Context, session string) (branch, checkpoint string, epoch int64, err error) {
	if !s.leasing {
		branch, checkpoint, err = s.Pushed(ctx, session)
		return branch, checkpoint, 0, err
	}
	var row struct {
		Branch     string `db:"pushed_branch"`
		Checkpoint string `db:"pushed_checkpoint"`
		Owner      string `db:"lease_owner"`
		Epoch      int64  `db:"lease_epoch"`
	}
	err = s.db.GetContext(ctx, &row, `SELECT pushed_branch, pushed_checkpoint, lease_owner, lease_epoch FROM sessions WHERE id = ?`, session)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return "", "", 0, fmt.Errorf("get pushed checkpoint of session %q: %w", session, err)
	}
	if err := s.checkHeld(session, row.Owner, row.Epoch); err != nil {
		return "", "", 0, fmt.Errorf("get pushed checkpoint: %w", err)
	}
	return row.Branch, row.Checkpoint, row.Epoch, nil
}

// HeldEpoch returns the epoch this store holds session at, from memory,
// and whether it holds it.
func (s *Store) HeldEpoch(session string) (int64, bool) {
	if !s.leasing {
		return 0, false
	}
	return s.leases.get(session)
}

// HoldHanded takes up, in one statement, the leases other hosts handed to
// this host (HandOver) that it does not hold yet: it renews them under
// this run and holds them, so that a session moved or drained here stays
// here whether or not a request reaches it (the cluster calls it at each
// renewal). It returns them, by session. Without leasing it does nothing.
func (s *Store) HoldHanded(ctx context.Context) ([]Lease, error) {
	if !s.leasing {
		return nil, nil
	}
	var rows []leaseRow
	err := s.db.SelectContext(ctx, &rows, `UPDATE sessions SET lease_run = ?, lease_expires = `+dbNowSQL+` + ?
		WHERE id IN (SELECT id FROM sessions WHERE status <> ? AND lease_owner = ? AND lease_run = ''
			AND lease_expires > `+dbNowSQL+` ORDER BY id FOR NO KEY UPDATE)
		RETURNING `+leaseCols, s.leaseRun, s.cfg.LeaseTTL.Nanoseconds(), SessionClosed, s.cfg.HostID)
	if err != nil {
		return nil, fmt.Errorf("hold the sessions handed to this host: %w", err)
	}
	out := make([]Lease, 0, len(rows))
	for _, r := range rows {
		if held, ok := s.leases.get(r.ID); ok && held != r.Epoch {
			s.leases.drop(r.ID, held)
		}
		s.leases.set(r.ID, r.Epoch)
		out = append(out, r.lease())
	}
	return out, nil
}

// OwnedCount is how many open sessions the database leases to this host,
// whether or not any was loaded since (the hosts' SESSIONS). Without
// leasing, every open session.
func (s *Store) OwnedCount(ctx context.Context) (int, error) {
	q, args := `SELECT COUNT(*) FROM sessions WHERE status <> ?`, []any{SessionClosed}
	if s.leasing {
		q, args = q+` AND lease_owner = ?`, append(args, s.cfg.HostID)
	}
	var n int
	if err := s.db.GetContext(ctx, &n, q, args...); err != nil {
		return 0, fmt.Errorf("count owned sessions: %w", err)
	}
	return n, nil
}

// RecordPushedTree is RecordPushed that also records tree, the tree of
// checkpoint: a take-over compares it with the turns' checkpoints to say
// which turns' work never reached the remote. It is fenced (see
// ErrFenced); it returns ErrNotFound for an unknown session.
func (s *Store) RecordPushedTree(ctx context.Context, session, branch, checkpoint, tree string) error {
	err := s.fenced(ctx, session, func(ex sqlx.ExtContext) error {
		res, err := ex.ExecContext(ctx, `UPDATE sessions SET pushed_branch = ?, pushed_checkpoint = ?, pushed_tree = ? WHERE id = ?`,
			branch, checkpoint, tree, session)
		if err == nil {
			err = mustAffect(res)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record pushed checkpoint of session %q: %w", session, s.mapWriteErr(err))
	}
	return nil
}

// unpushedTurns returns, of the ended turns of session (in tx, before a
// take-over ends the open ones), those whose checkpoint is not the one
// pushed (tree) nor before it: the turns whose work never reached the
// remote. With no tree recorded (a push recorded before trees were) but a
// checkpoint pushed, it cannot tell, and returns none.
func (s *Store) unpushedTurns(ctx context.Context, tx *sqlx.Tx, session, checkpoint, tree string) ([]int64, error) {
	if tree == "" && checkpoint != "" {
		return []int64{}, nil
	}
	var rows []struct {
		Number int64  `db:"number"`
		After  string `db:"checkpoint_after"`
	}
	if err := tx.SelectContext(ctx, &rows, `SELECT number, checkpoint_after FROM turns
		WHERE session_id = ? AND ended_at IS NOT NULL AND checkpoint_after <> '' ORDER BY number`, session); err != nil {
		return nil, fmt.Errorf("read the turns' checkpoints: %w", err)
	}
	from := 0
	for i, r := range rows {
		if tree != "" && r.After == tree {
			from = i + 1
		}
	}
	out := []int64{}
	for _, r := range rows[from:] {
		out = append(out, r.Number)
	}
	return out, nil
}
