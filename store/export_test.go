package store

import "context"

// TraceStep names a writer step for the external benchmarks.
type TraceStep = traceStep

// The writer's steps, for the external benchmarks.
const (
	StepWoke      = stepWoke
	StepTook      = stepTook
	StepBegin     = stepBegin
	StepCommit    = stepCommit
	StepCommitted = stepCommitted
)

// OpenTraced is Open with a hook told of each step of the writer and of
// the seqs of the events concerned (none for StepWoke).
func OpenTraced(ctx context.Context, cfg Config, hook func(step TraceStep, seqs []int64)) (*Store, error) {
	cfg.trace = func(step traceStep, items []item) {
		var seqs []int64
		for i := range items {
			if it := &items[i]; it.hasEvent() {
				seqs = append(seqs, it.ev.Seq)
			}
		}
		hook(step, seqs)
	}
	return Open(ctx, cfg)
}
