package httpapi

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/agentpool/agentpool/pool"
)

// pruningPool is the fake pool with a Prune.
type pruningPool struct {
	*fakePool
	prune func(context.Context, pool.PruneRequest) (pool.PruneResult, error)
}

func (p pruningPool) Prune(ctx context.Context, req pool.PruneRequest) (pool.PruneResult, error) {
	return p.prune(ctx, req)
}

func TestPruneEndpoint(t *testing.T) {
	var got []pool.PruneRequest
	fp := &fakePool{}
	pp := pruningPool{fakePool: fp, prune: func(_ context.Context, req pool.PruneRequest) (pool.PruneResult, error) {
		got = append(got, req)
		return pool.PruneResult{DryRun: req.DryRun, Sessions: []pool.PrunedSession{{Session: "old", Pruned: true}}}, nil
	}}
	env := newTestEnv(t, fp, func(c *Config) { c.Pool = pp })
	ctx := context.Background()

	tests := []struct {
		req  PruneRequest
		want pool.PruneRequest
	}{
		{PruneRequest{}, pool.PruneRequest{OlderThan: DefaultPruneAge}},
		{PruneRequest{OlderThan: "3d", Branches: true}, pool.PruneRequest{OlderThan: 72 * time.Hour, Branches: true}},
		{PruneRequest{OlderThan: "90m", DryRun: true}, pool.PruneRequest{OlderThan: 90 * time.Minute, DryRun: true}},
		{PruneRequest{OlderThan: "0"}, pool.PruneRequest{}},
	}
	for _, tt := range tests {
		got = nil
		res, err := env.client.Prune(ctx, tt.req)
		if err != nil || len(got) != 1 || got[0] != tt.want || len(res.Sessions) != 1 || res.DryRun != tt.want.DryRun {
			t.Errorf("Prune(%+v) = %+v, %v (pool got %+v); want the pool asked %+v", tt.req, res, err, got, tt.want)
		}
	}
	for _, bad := range []string{"7 days", "-1h", "d", "1.5d"} {
		var ae *Error
		if _, err := env.client.Prune(ctx, PruneRequest{OlderThan: bad}); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != "older_than" {
			t.Errorf("Prune(older than %q) error = %v; want 400 naming older_than", bad, err)
		}
	}

	plain := newTestEnv(t, &fakePool{}, nil)
	var ae *Error
	if _, err := plain.client.Prune(ctx, PruneRequest{}); !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented {
		t.Errorf("Prune() of a pool that cannot prune error = %v; want 501", err)
	}
}

func TestListSessionsByStatus(t *testing.T) {
	fp := &fakePool{ListFunc: func(context.Context) ([]pool.Session, error) {
		return []pool.Session{{ID: "a", Status: pool.StatusOpen}, {ID: "b", Status: pool.StatusClosed}, {ID: "c", Status: pool.StatusOpen}}, nil
	}}
	env := newTestEnv(t, fp, nil)
	ctx := context.Background()
	for status, want := range map[string]string{"": "abc", pool.StatusOpen: "ac", pool.StatusClosed: "b"} {
		l, err := env.client.SessionsWithStatus(ctx, status)
		ids := ""
		for _, s := range l {
			ids += s.ID
		}
		if err != nil || ids != want {
			t.Errorf("SessionsWithStatus(%q) = %q, %v; want %q", status, ids, err, want)
		}
	}
	var ae *Error
	if _, err := env.client.SessionsWithStatus(ctx, "gone"); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != "status" {
		t.Errorf("SessionsWithStatus(gone) error = %v; want 400 naming status", err)
	}
}
