package registry

import (
	"errors"
	"fmt"
)

// Errors returned by Resolve, Probe and Patch. Test them with errors.Is; the
// messages around them name the provider and the cause.
var (
	// ErrUnknown: no built-in and no entry of the file has this id.
	ErrUnknown = errors.New("unknown provider")
	// ErrDisabled: the provider exists but "enabled" is false; the message
	// names the config file that says so.
	ErrDisabled = errors.New("provider is disabled")
	// ErrNotInstalled: command[0] was not found; the message carries the
	// PATH that was searched (Snapshot.PathEnv has it too).
	ErrNotInstalled = errors.New("provider is not installed")
	// ErrConfig: the provider cannot be launched as configured (its command
	// is not executable, or the config file is invalid).
	ErrConfig = errors.New("provider config error")
	// ErrPreconditionFailed: Patch was given an ifMatch that is not the
	// ETag of the file on disk; someone else changed the file meanwhile.
	ErrPreconditionFailed = errors.New("config file changed since it was read")
	// ErrNoFile: Patch needs Config.Path, and none was configured.
	ErrNoFile = errors.New("no providers file configured")
	// ErrNoProber: Probe needs Config.Prober, and none was configured.
	ErrNoProber = errors.New("no prober configured")
	// ErrClosed: the registry was closed.
	ErrClosed = errors.New("registry closed")
)

// ValidationError is one problem in a providers document: the JSON path of
// the offending value (e.g. "providers.claude.enabeld"), where it sits in
// the document, and what is wrong. A rejected document yields one or more of
// them, joined with errors.Join; errors.As finds the first.
type ValidationError struct {
	// File is the path of the document, or "patch result" for a Patch.
	File string
	// Path is the JSON path of the value, "" for the document itself.
	Path string
	// Line and Col are 1-based; Col counts characters.
	Line, Col int
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as file:line:col: path: message.
func (e *ValidationError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Col, e.Path, e.Msg)
}

// kindError is an error with a message of its own that matches one of the
// sentinels above with errors.Is, so that the message can read as one
// sentence ("unknown provider \"x\" (known: ...)") instead of ending in
// the sentinel's text.
type kindError struct {
	msg  string
	kind error
}

// errorOf returns a kindError: msg formatted, matching kind.
func errorOf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }
