-- 0004: a run awaiting a person's approval is not claimable (base.UNCLAIMABLE_PHASES); the index
-- workers claim from gets the same phase list as the claim_runnable query.
DROP INDEX unbroken_runs_runnable;
CREATE INDEX unbroken_runs_runnable ON unbroken_runs (submitted_at, run_id)
    WHERE submitted_at IS NOT NULL
      AND (phase IS NULL OR phase NOT IN ('awaiting_approval', 'completed', 'failed', 'max_turns', 'paused'));
