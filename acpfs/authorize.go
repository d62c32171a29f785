package acpfs

import (
	"context"
	"fmt"
)

// OpTerminal is the Access.Op of a terminal/create.
const OpTerminal = "terminal"

// Access is a bridge operation the Guard has accepted, as shown to an
// Authorizer before anything is read, written or started.
type Access struct {
	// Op is OpRead, OpWrite or OpTerminal.
	Op string
	// Path is the agent's absolute path: the file, or a terminal's cwd
	// ("" for the worktree root).
	Path string
	// Rel is the path relative to the worktree root ("." for the root).
	Rel string
	// Bytes is the size of the content of a write.
	Bytes int64
	// Command and Args are a terminal's command line.
	Command string
	Args    []string
}

// Authorizer decides whether an Access may go ahead: nil lets it, an error
// refuses it and is returned, wrapped, by the operation. An error wrapping
// ErrPermissionDenied is audited as refused. It may block (a person may be
// asked) and must return when ctx ends.
type Authorizer func(ctx context.Context, a Access) error

// authorizerKey is the context key of WithAuthorizer.
type authorizerKey struct{}

// WithAuthorizer returns a copy of ctx under which FS.ReadTextFile,
// FS.WriteTextFile and Terminals.Create call fn once the Guard has accepted
// the path and before they read, write or start anything. The caller that
// serves an agent's request knows who asks and under which policy (as
// net/http/httptrace hooks travel with a request's context); the FS keeps the
// order: guard first, then fn, then the operation.
func WithAuthorizer(ctx context.Context, fn Authorizer) context.Context {
	return context.WithValue(ctx, authorizerKey{}, fn)
}

// authorize calls the Authorizer of ctx, if any.
func authorize(ctx context.Context, a Access) error {
	fn, _ := ctx.Value(authorizerKey{}).(Authorizer)
	if fn == nil {
		return nil
	}
	if err := fn(ctx, a); err != nil {
		return fmt.Errorf("%s %q: %w", a.Op, a.Path, err)
	}
	return nil
}
