package wiring

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/cluster"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/store"
)

// Leases adapts the store's session leases to pool.Leases, cluster.Store
// and the worktrees' PushLedger.
type Leases struct{ S *store.Store }

var (
	_ pool.Leases   = Leases{}
	_ cluster.Store = Leases{}
	_ PushLedger    = Leases{}
)

// Host is this host's id.
func (a Leases) Host() string { return a.S.HostID() }

// Hold makes sure this host owns session.
func (a Leases) Hold(ctx context.Context, session string) error {
	_, err := a.S.Hold(ctx, session)
	if errors.Is(err, store.ErrFenced) {
		return fmt.Errorf("%w: %w", pool.ErrNotOwner, err)
	}
	return notFound(err)
}

// HandOver gives session to host to.
func (a Leases) HandOver(ctx context.Context, session, to, reason string) ([]backends.Event, error) {
	m, err := a.S.HandOver(ctx, session, to, reason)
	if errors.Is(err, store.ErrFenced) {
		return nil, fmt.Errorf("%w: %w", pool.ErrNotOwner, err)
	}
	return m.Events, notFound(err)
}

// Lease returns the lease of session with its status and active agent.
func (a Leases) Lease(ctx context.Context, session string) (cluster.Lease, error) {
	l, err := a.S.GetLease(ctx, session)
	if err != nil {
		return cluster.Lease{}, notFound(err)
	}
	return cluster.Lease{Session: l.Session, Owner: l.Owner, Epoch: l.Epoch, Expires: l.Expires, Open: l.Open, Agent: l.Agent}, nil
}

// Holds says whether this host holds the session's lease, from memory.
func (a Leases) Holds(session string) bool { return a.S.Holds(session) }

// RenewLeases extends this host's leases.
func (a Leases) RenewLeases(ctx context.Context) ([]string, error) { return a.S.RenewLeases(ctx) }

// ExpiredLeases lists the open sessions of dead hosts.
func (a Leases) ExpiredLeases(ctx context.Context, limit int) ([]cluster.Lease, error) {
	l, err := a.S.ExpiredLeases(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]cluster.Lease, 0, len(l))
	for _, x := range l {
		out = append(out, cluster.Lease{Session: x.Session, Owner: x.Owner, Epoch: x.Epoch, Expires: x.Expires, Open: x.Open, Agent: x.Agent})
	}
	return out, nil
}

// TakeOver takes an expired lease.
func (a Leases) TakeOver(ctx context.Context, session string) error {
	_, err := a.S.TakeOver(ctx, session)
	return err
}

// Owned lists the open sessions this host holds.
func (a Leases) Owned(ctx context.Context) ([]cluster.Lease, error) {
	l, err := a.S.OwnedLeases(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cluster.Lease, 0, len(l))
	for _, x := range l {
		out = append(out, cluster.Lease{Session: x.Session, Owner: x.Owner, Epoch: x.Epoch, Expires: x.Expires, Open: x.Open, Agent: x.Agent})
	}
	return out, nil
}

// PushedHeld is what was last pushed of session, under this host's lease.
func (a Leases) PushedHeld(ctx context.Context, session string) (string, string, int64, error) {
	return a.S.PushedHeld(ctx, session)
}

// RecordPushed records a push of session, under this host's lease.
func (a Leases) RecordPushed(ctx context.Context, session, branch, checkpoint, tree string) error {
	return a.S.RecordPushedTree(ctx, session, branch, checkpoint, tree)
}

// HoldHanded holds the sessions other hosts handed to this one.
func (a Leases) HoldHanded(ctx context.Context) ([]string, error) {
	l, err := a.S.HoldHanded(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = x.Session
	}
	return out, nil
}

// ClaimFence moves the remote fence of session, which this host just took
// over, to its lease (see Worktrees.ClaimFence): the cluster's
// Config.Claimed.
func (a Leases) ClaimFence(w Worktrees) func(ctx context.Context, session string) error {
	return func(ctx context.Context, session string) error {
		rec, err := a.S.GetSession(ctx, session)
		if err != nil {
			return err
		}
		branch := ""
		if row, err := a.S.GetWorktree(ctx, session); err == nil {
			branch = row.Branch
		}
		return w.ClaimFence(ctx, session, rec.Repo, branch)
	}
}
