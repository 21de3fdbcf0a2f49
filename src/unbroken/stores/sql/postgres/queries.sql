-- Every statement the PostgreSQL store runs, by name (`-- name: NAME` starts one).
-- Values are always bound parameters (%(name)s); nothing here is built from user input.
-- Lease times are taken from the database clock (clock_timestamp()), never the client's.

-- name: append
-- One save point as one statement, hence one atomic write: advance the head if it is still
-- at expect_seq under our fence, and only then write the record and upsert the ledger rows.
WITH advanced AS (
    UPDATE unbroken_runs
       SET head_seq = %(seq)s, task = %(task)s, phase = %(phase)s, turns = %(turns)s,
           tokens_used = %(tokens_used)s, updated_at = %(updated_at)s
     WHERE run_id = %(run_id)s AND head_seq = %(expect_seq)s
       AND (%(fence)s::bigint IS NULL OR fence = %(fence)s::bigint)
    RETURNING run_id
), record AS (
    INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum)
    SELECT run_id, %(seq)s, %(label)s, %(snapshot)s, %(body)s, %(checksum)s FROM advanced
    RETURNING seq
), ledger AS (
    INSERT INTO unbroken_effects AS e
           (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at)
    SELECT l.key, l.run_id, l.call_id, l.tool, l.args_hash, l.status, l.attempts, l.result,
           l.created_at, l.updated_at
      FROM advanced, jsonb_to_recordset(%(ledger)s::jsonb) AS l(
           key text, run_id text, call_id text, tool text, args_hash text, status text,
           attempts integer, result text, created_at double precision, updated_at double precision)
    ON CONFLICT (key) DO UPDATE
       SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, result = EXCLUDED.result,
           updated_at = EXCLUDED.updated_at, args_hash = EXCLUDED.args_hash
    RETURNING key
)
SELECT count(*) FROM record

-- name: create_run
INSERT INTO unbroken_runs (run_id) VALUES (%(run_id)s) ON CONFLICT (run_id) DO NOTHING

-- name: head_and_fence
SELECT head_seq, fence FROM unbroken_runs WHERE run_id = %(run_id)s

-- name: lock_run
SELECT head_seq, fence FROM unbroken_runs WHERE run_id = %(run_id)s FOR UPDATE

-- name: record_checksum
SELECT checksum FROM unbroken_records WHERE run_id = %(run_id)s AND seq = %(seq)s

-- name: read_records
SELECT seq, body, checksum FROM unbroken_records WHERE run_id = %(run_id)s ORDER BY seq

-- name: delete_records
DELETE FROM unbroken_records WHERE run_id = %(run_id)s

-- name: insert_record
INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum)
VALUES (%(run_id)s, %(seq)s, %(label)s, %(snapshot)s, %(body)s, %(checksum)s)

-- name: set_summary
UPDATE unbroken_runs
   SET head_seq = %(seq)s, task = %(task)s, phase = %(phase)s, turns = %(turns)s,
       tokens_used = %(tokens_used)s, updated_at = %(updated_at)s
 WHERE run_id = %(run_id)s

-- name: list_runs
SELECT run_id, task, phase, turns, tokens_used, head_seq, updated_at
  FROM unbroken_runs WHERE head_seq > 0 ORDER BY updated_at DESC

-- name: delete_run_records
DELETE FROM unbroken_records WHERE run_id = %(run_id)s

-- name: delete_run_effects
DELETE FROM unbroken_effects WHERE run_id = %(run_id)s

-- name: delete_run_row
DELETE FROM unbroken_runs WHERE run_id = %(run_id)s

-- name: ledger_upsert
-- Written only while the run's fence is still ours (or no fence is given).
INSERT INTO unbroken_effects AS e
       (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at)
SELECT %(key)s, %(run_id)s, %(call_id)s, %(tool)s, %(args_hash)s, %(status)s, %(attempts)s, %(result)s,
       %(created_at)s, %(updated_at)s
 WHERE %(fence)s::bigint IS NULL
    OR EXISTS (SELECT 1 FROM unbroken_runs WHERE run_id = %(run_id)s AND fence = %(fence)s::bigint)
ON CONFLICT (key) DO UPDATE
   SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, result = EXCLUDED.result,
       updated_at = EXCLUDED.updated_at, args_hash = EXCLUDED.args_hash
RETURNING key

-- name: ledger_claim
-- Insert-if-absent: RETURNING says whether this call inserted the key.
INSERT INTO unbroken_effects
       (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at)
SELECT %(key)s, %(run_id)s, %(call_id)s, %(tool)s, %(args_hash)s, %(status)s, %(attempts)s, %(result)s,
       %(created_at)s, %(updated_at)s
 WHERE %(fence)s::bigint IS NULL
    OR EXISTS (SELECT 1 FROM unbroken_runs WHERE run_id = %(run_id)s AND fence = %(fence)s::bigint)
ON CONFLICT (key) DO NOTHING
RETURNING key

-- name: ledger_get
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at
  FROM unbroken_effects WHERE key = %(key)s AND run_id = %(run_id)s

-- name: ledger_list
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at
  FROM unbroken_effects WHERE run_id = %(run_id)s ORDER BY created_at, key

-- name: ledger_gc
-- Only entries of finished runs (or of runs that no longer exist) are collected.
DELETE FROM unbroken_effects AS e
 WHERE e.updated_at < %(older_than)s
   AND NOT EXISTS (SELECT 1 FROM unbroken_runs AS r
                    WHERE r.run_id = e.run_id AND (r.phase IS NULL OR r.phase <> ALL (%(terminal)s)))

-- name: acquire_lease
-- Take the lease if nobody holds a live one, if we hold it, or if the holder was proven dead;
-- every acquisition bumps the fence so writes of any earlier holder are refused.
INSERT INTO unbroken_runs AS r (run_id, fence, owner, lease_expires)
VALUES (%(run_id)s, 1, %(owner)s, clock_timestamp() + make_interval(secs => %(ttl)s))
ON CONFLICT (run_id) DO UPDATE
   SET fence = r.fence + 1, owner = EXCLUDED.owner, lease_expires = EXCLUDED.lease_expires
 WHERE r.owner IS NULL OR r.lease_expires IS NULL OR r.lease_expires <= clock_timestamp()
    OR r.owner = %(owner)s OR r.owner = %(takeover_from)s
RETURNING fence, extract(epoch FROM lease_expires)::double precision

-- name: lease_holder
SELECT owner, extract(epoch FROM lease_expires - clock_timestamp())::double precision
  FROM unbroken_runs WHERE run_id = %(run_id)s

-- name: renew_lease
UPDATE unbroken_runs SET lease_expires = clock_timestamp() + make_interval(secs => %(ttl)s)
 WHERE run_id = %(run_id)s AND fence = %(fence)s AND owner = %(owner)s
RETURNING extract(epoch FROM lease_expires)::double precision

-- name: release_lease
UPDATE unbroken_runs SET owner = NULL, lease_expires = NULL WHERE run_id = %(run_id)s AND fence = %(fence)s

-- name: lease_of
SELECT owner, fence, extract(epoch FROM lease_expires)::double precision
  FROM unbroken_runs
 WHERE run_id = %(run_id)s AND owner IS NOT NULL AND lease_expires > clock_timestamp()

-- name: submit
-- Safe to repeat: a run id already submitted (or started) with the same task is left as it is.
INSERT INTO unbroken_runs AS r (run_id, task, agent, submitted_at)
VALUES (%(run_id)s, %(task)s, %(agent)s, clock_timestamp())
ON CONFLICT (run_id) DO UPDATE
   SET task = coalesce(r.task, EXCLUDED.task), agent = EXCLUDED.agent,
       submitted_at = coalesce(r.submitted_at, EXCLUDED.submitted_at)
 WHERE r.task IS NULL OR r.task = EXCLUDED.task
RETURNING run_id

-- name: run_task
SELECT task FROM unbroken_runs WHERE run_id = %(run_id)s

-- name: claim_runnable
-- Workers race here: SKIP LOCKED makes each skip the rows another is claiming right now, and
-- the phase list matches the unbroken_runs_runnable index predicate word for word.
WITH picked AS (
    SELECT run_id FROM unbroken_runs
     WHERE submitted_at IS NOT NULL
       AND (phase IS NULL OR phase NOT IN ('completed', 'max_turns', 'failed', 'paused'))
       AND (%(agent)s::text IS NULL OR agent = %(agent)s::text)
       AND (owner IS NULL OR lease_expires IS NULL OR lease_expires <= clock_timestamp())
     ORDER BY submitted_at, run_id
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED
)
UPDATE unbroken_runs AS r
   SET fence = r.fence + 1, owner = %(owner)s,
       lease_expires = clock_timestamp() + make_interval(secs => %(ttl)s)
  FROM picked
 WHERE r.run_id = picked.run_id
RETURNING r.run_id, r.task, r.agent, r.fence, extract(epoch FROM r.lease_expires)::double precision
