// Package backends defines the contract every agent backend honours (ACP over
// stdio, or a terminal program driven through a PTY), the launch Spec the
// registry resolves, the transport-neutral Event that the pool stores and
// fans out, and the process helpers shared by all backends: own process group,
// parent-death signal, one waiter goroutine, drained output, a bounded stderr
// tail and an idempotent stop ladder.
package backends
