-- The tree of the checkpoint last pushed for a session (pushed_checkpoint
-- is its commit): a take-over compares it with the turns' checkpoints to
-- say which turns' work never reached the shared repository.
ALTER TABLE sessions ADD COLUMN pushed_tree TEXT NOT NULL DEFAULT '';
