-- 0002: runs submitted for workers (agent name, submission time) and the index workers claim from.
ALTER TABLE unbroken_runs ADD COLUMN agent text;
ALTER TABLE unbroken_runs ADD COLUMN submitted_at timestamptz;
-- Only runs a worker may still pick up are indexed: submitted, not finished, not paused.
-- The phase list must match the claim_runnable query word for word (the planner proves the
-- query implies this predicate) and state.TERMINAL_PHASES plus 'paused' (a test checks it).
CREATE INDEX unbroken_runs_runnable ON unbroken_runs (submitted_at, run_id)
    WHERE submitted_at IS NOT NULL
      AND (phase IS NULL OR phase NOT IN ('completed', 'max_turns', 'failed', 'paused'));
CREATE INDEX unbroken_runs_updated ON unbroken_runs (updated_at DESC) WHERE head_seq > 0;
