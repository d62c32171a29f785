// Package agenttest provides fake agents for tests and the built-in demo
// agent: a scripted ACP agent that speaks raw JSON-RPC (so it can also
// misbehave: string or zero ids, unknown methods, garbage lines, oversized
// lines, crashes, ignoring cancel or SIGTERM, spawning grandchildren, ceasing
// to read its stdin) driven by a JSON Script. Sys steps make it act with
// its own system calls, as a hostile agent would (write, read, connect,
// exec, a setsid'd child, a double-forked daemon), and report the outcome
// in a text that ParseSysResult reads; ReadPidFile, Alive and Kill follow
// the processes it leaves behind.
//
// Fakes are the test binary itself, re-executed: a package's TestMain calls
// Dispatch before m.Run, and Spec or Command build the launch line that makes
// the re-executed binary act as the named helper. Nothing else may write to
// stdout in such a process, because stdout is the protocol stream.
package agenttest
