package wiring

import (
	"context"

	"github.com/agentpool/agentpool/hosts"
	"github.com/agentpool/agentpool/store"
)

// Hosts is hosts.Store over the store.
type Hosts struct{ S *store.Store }

var _ hosts.Store = Hosts{}

// PutHost records a heartbeat.
func (a Hosts) PutHost(ctx context.Context, h hosts.Host) error {
	return a.S.PutHost(ctx, store.Host{ID: h.ID, Advertise: h.Advertise, Capacity: h.Capacity, Providers: h.Providers,
		Warm: h.Warm, Sessions: h.Sessions, Version: h.Version, StartedAt: h.StartedAt, HeartbeatAt: h.HeartbeatAt,
		TokenSHA256: h.TokenSHA256})
}

// ListHosts reads every host.
func (a Hosts) ListHosts(ctx context.Context) ([]hosts.Host, error) {
	l, err := a.S.ListHosts(ctx)
	out := make([]hosts.Host, 0, len(l))
	for _, h := range l {
		out = append(out, hosts.Host{ID: h.ID, Advertise: h.Advertise, Capacity: h.Capacity, Providers: h.Providers,
			Warm: h.Warm, Sessions: h.Sessions, Version: h.Version, StartedAt: h.StartedAt, HeartbeatAt: h.HeartbeatAt,
			TokenSHA256: h.TokenSHA256})
	}
	return out, err
}

// RemoveHost forgets a host.
func (a Hosts) RemoveHost(ctx context.Context, id string) error { return a.S.RemoveHost(ctx, id) }
