-- Leases: which host owns a session (lease_owner), the fencing number
-- every write for the session carries (lease_epoch) and when the lease
-- runs out (lease_expires, unix ns by the database's clock); the branch
-- and checkpoint last pushed for it, from which another host takes it
-- over. The host whose disk holds a worktree, and the digest of each
-- host's API token. On SQLite, one host, the columns stay at their
-- defaults but for the pushed branch.
ALTER TABLE sessions ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN lease_expires INTEGER NOT NULL DEFAULT 0;
-- lease_run names the run of the owner (a daemon's start) that holds
-- the lease, '' for any run (a session handed over): a run that another
-- run of the same host fenced cannot hold the session again.
ALTER TABLE sessions ADD COLUMN lease_run TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN pushed_branch TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN pushed_checkpoint TEXT NOT NULL DEFAULT '';
ALTER TABLE session_worktrees ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE hosts ADD COLUMN token_sha256 TEXT NOT NULL DEFAULT '';
