-- 0006: the effect ledger is keyed by (run_id, key) (issue 21): an idempotency key is unique within
-- its run only, so no write of one run (an imported checkpoint reusing another run's keys) can reach
-- another run's entry. Every table's key now leads with run_id (issue 24: the distribution column).
-- Existing rows all fit (a key unique in the store is unique in its run); the new key's index is
-- built by reading the table once, at upgrade, under the migration's lock.
ALTER TABLE unbroken_effects DROP CONSTRAINT unbroken_effects_pkey;
ALTER TABLE unbroken_effects ADD CONSTRAINT unbroken_effects_pkey PRIMARY KEY (run_id, key);
