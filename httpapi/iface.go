package httpapi

import (
	"context"

	"github.com/agentpool/agentpool/backends"
	"github.com/agentpool/agentpool/permission"
	"github.com/agentpool/agentpool/pool"
	"github.com/agentpool/agentpool/registry"
)

// Pool is what the server needs of the agent pool; *pool.Pool satisfies it.
// Errors wrap the pool's sentinels (pool.ErrNotFound, pool.ErrBusy, ...),
// permission.ErrUnknownRequest and permission.ErrInvalidChoice, or the
// registry's; the server maps them to statuses. A cancelled ctx means the
// client went away or the server is shutting down.
type Pool interface {
	Create(ctx context.Context, req pool.CreateRequest) (pool.Session, error)
	// CreatePrompt is Create then StartPrompt of text on the session made:
	// err is the create's; turnErr says why the first turn did not start,
	// the session existing all the same.
	CreatePrompt(ctx context.Context, req pool.CreateRequest, text string) (sess pool.Session, t pool.Turn, turnErr, err error)
	Get(ctx context.Context, id string) (pool.Session, error)
	List(ctx context.Context) ([]pool.Session, error)
	Close(ctx context.Context, id string, discard bool) (pool.CloseResult, error)
	// StartPrompt returns at once with the started turn; its events follow
	// on the session's stream.
	StartPrompt(ctx context.Context, req pool.PromptRequest) (pool.Turn, error)
	WaitTurn(ctx context.Context, session string, turn int64) (pool.Turn, error)
	Cancel(ctx context.Context, session string) error
	Retry(ctx context.Context, session string) (pool.Turn, error)
	Turns(ctx context.Context, session string) ([]pool.Turn, error)
	// Subscribe returns a subscription whose Next gives the session's
	// events after seq `after`, stored then live, with no gap and no
	// duplicate; it ends with pool.ErrClosed after a closed session's last
	// event. Its Head is the session's newest seq when it was made.
	Subscribe(ctx context.Context, session string, after int64) (*pool.Subscription, error)
	// SubscribeAll returns the daemon-wide stream from now on, without
	// backlog; a subscriber that falls behind ends with
	// pool.ErrSlowSubscriber.
	SubscribeAll() *pool.Subscription
	Answer(session, request, choice string) error
	Pending(session string) []permission.Pending
	Diff(ctx context.Context, session string, turn int64) (pool.Diff, error)
	Restore(ctx context.Context, session string, turn int64, after bool) error
	Backends() []pool.AgentStatus
	// Backend returns the running backend of (session, agent), starting
	// it if needed; agent "" means the session's active agent. The caller
	// must not stop it.
	Backend(ctx context.Context, session, agent string) (backends.Backend, error)
	Stats() pool.Stats
}

// Registry is what the server needs of the provider registry;
// *registry.Registry satisfies it.
type Registry interface {
	Snapshot() registry.Snapshot
	// Patch applies a JSON Merge Patch to one provider's entry; ifMatch ""
	// means unconditionally. It returns the new ETag of the file.
	Patch(ctx context.Context, id string, mergePatch []byte, ifMatch string) (string, error)
	// Remove deletes a custom provider's entry (ErrBuiltIn for a
	// built-in); it returns the new ETag of the file.
	Remove(ctx context.Context, id string, ifMatch string) (string, error)
	Reload() error
	Probe(ctx context.Context, id string) (registry.ProbeInfo, error)
	Subscribe() (registry.Snapshot, <-chan registry.Change, func())
}

var (
	_ Pool     = (*pool.Pool)(nil)
	_ Registry = (*registry.Registry)(nil)
)
