package store

// traceStep is a step of the writer that a trace hook is told about, for
// the benchmark that splits delivery latency into its parts.
type traceStep int

// The writer's steps, in the order one batch goes through them.
const (
	// stepWoke: the writer woke for a queue that became non-empty; it may
	// linger next.
	stepWoke traceStep = iota
	// stepTook: it took the queued items (after lingering).
	stepTook
	// stepBegin: a transaction of the items given begins.
	stepBegin
	// stepCommit: the transaction's statements ran; its commit begins.
	stepCommit
	// stepCommitted: the commit returned; the committed callbacks follow.
	stepCommitted
)

// traceHook is told of each step of the writer, on the writer goroutine,
// with the items concerned (nil for stepWoke). It must not keep them.
type traceHook func(step traceStep, items []item)

// trace tells the store's trace hook, if any, of a step.
func (s *Store) trace(step traceStep, items []item) {
	if s.cfg.trace != nil {
		s.cfg.trace(step, items)
	}
}
