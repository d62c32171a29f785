// Package store keeps agentpool's state in SQLite, or in PostgreSQL
// (Config.URL): sessions, their worktrees, the (session, agent) backends,
// turns, the per-session event log and the permission audit. The contract
// is the same on both engines, and the tests run against both; what
// differs (errors, migrations, a few statements) is in engine.go, and
// opening a PostgreSQL database in package store/postgres.
//
// The database runs in WAL mode with its pragmas in the DSN, so that every
// pooled connection has them; the schema comes from migrations embedded in the
// binary and recorded in schema_migrations. Every call takes a context. Times
// are stored as UTC unix nanoseconds and read back in UTC.
//
// Events do not go through a request per event: Append enqueues, and one
// writer goroutine commits them in batched transactions (group commit),
// retrying failed batches with backoff and in order, so that a database
// outage delays the log without stopping the caller. The writes on a turn's
// path (StartTurn, EndTurn, SetActiveAgent) share that queue, in order with
// the events; the reads of turns and sessions wait for them first. One
// process at a time has a SQLite database open: Open takes a flock beside
// it. Several may share a PostgreSQL one: there the transaction that
// stores an event allocates its seq from its session's row, and a turn's
// row its number, never from a cache of the process.
package store
