-- 0008: an ordinary save updates its run's row in place (a HOT update: no new index entries,
-- less WAL). PostgreSQL does so only if no column an index reads changes, and every save changed
-- three: updated_at (the listing index's key), head_seq (its filter) and phase (the claim
-- index's filter: a turn moves it between awaiting_model and running_tools). So:
-- * the listing is indexed by updated_second, updated_at cut to the second, which a save changes
--   at most once a second. A page reads that index backward and sorts the runs of one second at
--   a time by (updated_at, run_id): the same order as before.
-- * the claim index is filtered on phase_claimable, whether the phase is not one of
--   base.UNCLAIMABLE_PHASES, which changes only when a run enters or leaves one of them.
-- Both are generated columns, so every statement that sets updated_at or phase keeps them right.
-- fillfactor leaves room on each page for a row's new version. Adding the columns rewrites the
-- runs table once (its rows are small), under the migration's lock.
ALTER TABLE unbroken_runs SET (fillfactor = 80);
ALTER TABLE unbroken_runs
    ADD COLUMN updated_second double precision GENERATED ALWAYS AS (floor(updated_at)) STORED,
    ADD COLUMN phase_claimable boolean GENERATED ALWAYS AS (
        phase IS NULL OR phase NOT IN ('awaiting_approval', 'completed', 'failed', 'max_turns', 'paused')) STORED;
DROP INDEX unbroken_runs_updated;
CREATE INDEX unbroken_runs_updated_second ON unbroken_runs (updated_second) WHERE updated_second IS NOT NULL;
DROP INDEX unbroken_runs_runnable;
CREATE INDEX unbroken_runs_runnable ON unbroken_runs (submitted_at, run_id) WHERE submitted_at IS NOT NULL AND phase_claimable;
