-- 0005: paged reads (issue 16). Listings page by (updated_at, run_id) descending, so the listing
-- index gets run_id as its second column (it is the same index every save already updates), and
-- snapshot records get a partial index (written by snapshot saves only), so "the newest snapshot
-- at or before a seq" is one index probe. Building them reads the tables once, at upgrade.
DROP INDEX unbroken_runs_updated;
CREATE INDEX unbroken_runs_updated ON unbroken_runs (updated_at, run_id) WHERE head_seq > 0;
CREATE INDEX unbroken_records_snapshots ON unbroken_records (run_id, seq) WHERE snapshot;
