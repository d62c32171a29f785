package acp_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/backends/acp"
	"github.com/agentpool/agentpool/permission"
)

// brokerPerms routes a backend's permission requests through a real
// permission.Broker with policy, as the pool does, and keeps the requests
// and the audit records.
type brokerPerms struct {
	broker *permission.Broker
	policy permission.Policy

	mu      sync.Mutex
	reqs    []acp.PermissionRequest
	records []permission.Record
}

func newBrokerPerms(t *testing.T, rules map[string]string, onRequested func(*permission.Broker, permission.Pending)) *brokerPerms {
	t.Helper()
	policy, err := permission.PolicyFrom(rules, "")
	if err != nil {
		t.Fatal(err)
	}
	bp := &brokerPerms{policy: policy}
	cfg := permission.Config{Logger: slog.New(slog.DiscardHandler), OnResolved: func(r permission.Record) {
		bp.mu.Lock()
		bp.records = append(bp.records, r)
		bp.mu.Unlock()
	}}
	if onRequested != nil {
		cfg.OnRequested = func(p permission.Pending) { onRequested(bp.broker, p) }
	}
	bp.broker = permission.NewBroker(cfg)
	t.Cleanup(bp.broker.Close)
	return bp
}

// fn is the PermissionFunc; it maps the request as pool/perm.go does.
func (bp *brokerPerms) fn(ctx context.Context, req acp.PermissionRequest) (acp.PermissionOutcome, error) {
	bp.mu.Lock()
	bp.reqs = append(bp.reqs, req)
	bp.mu.Unlock()
	opts := make([]permission.Option, 0, len(req.Options))
	for _, o := range req.Options {
		opts = append(opts, permission.Option{ID: o.ID, Name: o.Name, Kind: o.Kind})
	}
	out, err := bp.broker.Request(ctx, permission.Request{
		Session: "s", Agent: "fake", Turn: req.Turn, ToolCallID: req.ToolCallID, Title: req.Title,
		ToolKind: req.Kind, Action: permission.Action(req.Action), Locations: req.Locations,
		RawInput: req.RawInput, Options: opts, Policy: bp.policy,
	})
	return acp.PermissionOutcome{Cancelled: out.Cancelled, OptionID: out.OptionID}, err
}

func (bp *brokerPerms) requests() []acp.PermissionRequest {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return append([]acp.PermissionRequest(nil), bp.reqs...)
}

func (bp *brokerPerms) audit() []permission.Record {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return append([]permission.Record(nil), bp.records...)
}

var _ backends.PermissionFunc = (*brokerPerms)(nil).fn
