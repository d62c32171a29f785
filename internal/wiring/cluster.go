package wiring

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentpool/agentpool/cluster"
	"github.com/agentpool/agentpool/httpapi"
)

// ClusterAPI adapts *cluster.Cluster to httpapi.Cluster.
type ClusterAPI struct{ C *cluster.Cluster }

var _ httpapi.Cluster = ClusterAPI{}

// Self is this host's id.
func (a ClusterAPI) Self() string { return a.C.Self() }

// Key is the cluster credential.
func (a ClusterAPI) Key() string { return a.C.Key() }

// KnownToken says whether token is a live host's user token.
func (a ClusterAPI) KnownToken(token string) bool { return a.C.KnownToken(context.Background(), token) }

// TokenHashes returns the SHA-256 of each live host's user token.
func (a ClusterAPI) TokenHashes(ctx context.Context) [][]byte { return a.C.TokenHashes(ctx) }

var _ httpapi.TokenHashes = ClusterAPI{}

// Owner returns the host that owns session.
func (a ClusterAPI) Owner(ctx context.Context, session string) (httpapi.ClusterHost, bool, error) {
	h, self, err := a.C.Owner(ctx, session)
	return httpapi.ClusterHost{ID: h.ID, Advertise: h.Advertise}, self, clusterErr(err)
}

// Place picks the host of a new session.
func (a ClusterAPI) Place(ctx context.Context, agent, want string) (httpapi.ClusterHost, bool, error) {
	h, self, err := a.C.Place(ctx, agent, want)
	return httpapi.ClusterHost{ID: h.ID, Advertise: h.Advertise}, self, clusterErr(err)
}

// clusterErr marks the cluster's errors with httpapi's.
func clusterErr(err error) error {
	for _, m := range []struct{ from, to error }{
		{cluster.ErrSessionMoving, httpapi.ErrSessionMoving},
		{cluster.ErrUnknownHost, httpapi.ErrUnknownHost},
		{cluster.ErrHostDown, httpapi.ErrHostDown},
		{cluster.ErrNoHost, httpapi.ErrNoHost},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w: %w", m.to, err)
		}
	}
	return err
}
