package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ErrBuiltIn is returned by Remove for a provider agentpool ships: a
// built-in cannot be removed, only disabled ("enabled": false).
var ErrBuiltIn = errors.New("provider is built in")

// Remove deletes the entry of custom provider id from the providers file,
// atomically and with the checks of Patch (ifMatch, the whole resulting file
// validated first: an entry that another one extends stays). A built-in
// provider is refused with ErrBuiltIn, an id with no entry with ErrUnknown.
// Sessions whose agent it was keep an agent already running; the provider
// cannot start again for them. Remove returns the ETag of the file as
// written.
func (r *Registry) Remove(ctx context.Context, id string, ifMatch string) (string, error) {
	if slices.ContainsFunc(builtins(r.cfg.SelfPath), func(d *definition) bool { return d.id == id }) {
		return "", fmt.Errorf("remove %q: %w: it can be disabled, not removed (providers disable %s)", id, ErrBuiltIn, id)
	}
	if _, ok := r.Snapshot().Provider(id); !ok {
		return "", errorOf(ErrUnknown, "remove %q: unknown provider", id)
	}
	etag, err := r.Patch(ctx, id, []byte("null"), ifMatch)
	if err != nil {
		return "", fmt.Errorf("remove %q: %w", id, err)
	}
	return etag, nil
}
