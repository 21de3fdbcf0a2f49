-- Every statement the PostgreSQL store runs, by name (`-- name: NAME` starts one).
-- Values are always bound parameters (%(name)s); nothing here is built from user input.
-- Lease times are taken from the database clock (clock_timestamp()), never the client's.

-- name: append_record
-- One save point without ledger entries (most saves), as one statement, hence one atomic write:
-- advance the head if it is still at expect_seq under our fence, and only then write the record.
-- The row count of the INSERT says which happened (1: written; 0: refused, nothing changed).
-- The task is written only when it changes: a task stored out of line (TOAST, over ~2 KB
-- compressed) would otherwise be written again, with its WAL, at every save (~10 KB for 9 KB).
WITH advanced AS (
    UPDATE unbroken_runs
       SET head_seq = %(seq)s, task = CASE WHEN task IS DISTINCT FROM %(task)s THEN %(task)s ELSE task END,
           phase = %(phase)s, turns = %(turns)s,
           tokens_used = %(tokens_used)s, updated_at = %(updated_at)s
     WHERE run_id = %(run_id)s AND head_seq = %(expect_seq)s
       AND (%(fence)s::bigint IS NULL OR fence = %(fence)s::bigint)
    RETURNING run_id
)
INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum)
SELECT run_id, %(seq)s, %(label)s, %(snapshot)s, %(body)s, %(checksum)s FROM advanced

-- name: append
-- A save point with ledger entries, as one statement, hence one atomic write: advance the head
-- if it is still at expect_seq under our fence, and only then upsert the ledger rows and write
-- the record (a data-modifying WITH runs to completion whatever the outer statement reads). As
-- append_record, the row count of the INSERT says which happened.
WITH advanced AS (
    UPDATE unbroken_runs
       SET head_seq = %(seq)s, task = CASE WHEN task IS DISTINCT FROM %(task)s THEN %(task)s ELSE task END,
           phase = %(phase)s, turns = %(turns)s,
           tokens_used = %(tokens_used)s, updated_at = %(updated_at)s
     WHERE run_id = %(run_id)s AND head_seq = %(expect_seq)s
       AND (%(fence)s::bigint IS NULL OR fence = %(fence)s::bigint)
    RETURNING run_id
), ledger AS (
    INSERT INTO unbroken_effects AS e
           (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum)
    SELECT l.key, l.run_id, l.call_id, l.tool, l.args_hash, l.status, l.attempts, l.result,
           l.created_at, l.updated_at, l.lease_fence, l.checksum
      FROM advanced, jsonb_to_recordset(%(ledger)s::jsonb) AS l(
           key text, run_id text, call_id text, tool text, args_hash text, status text,
           attempts integer, result text, created_at double precision, updated_at double precision,
           lease_fence bigint, checksum text)
    ON CONFLICT (run_id, key) DO UPDATE
       SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, result = EXCLUDED.result,
           updated_at = EXCLUDED.updated_at, args_hash = EXCLUDED.args_hash, call_id = EXCLUDED.call_id,
           tool = EXCLUDED.tool, created_at = EXCLUDED.created_at, lease_fence = EXCLUDED.lease_fence,
           checksum = EXCLUDED.checksum
)
INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum)
SELECT run_id, %(seq)s, %(label)s, %(snapshot)s, %(body)s, %(checksum)s FROM advanced

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
   SET head_seq = %(seq)s, task = CASE WHEN task IS DISTINCT FROM %(task)s THEN %(task)s ELSE task END,
       phase = %(phase)s, turns = %(turns)s,
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
       (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum)
SELECT %(key)s, %(run_id)s, %(call_id)s, %(tool)s, %(args_hash)s, %(status)s, %(attempts)s, %(result)s,
       %(created_at)s, %(updated_at)s, %(lease_fence)s, %(checksum)s
 WHERE %(fence)s::bigint IS NULL
    OR EXISTS (SELECT 1 FROM unbroken_runs WHERE run_id = %(run_id)s AND fence = %(fence)s::bigint)
ON CONFLICT (run_id, key) DO UPDATE
   SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, result = EXCLUDED.result,
       updated_at = EXCLUDED.updated_at, args_hash = EXCLUDED.args_hash, call_id = EXCLUDED.call_id,
       tool = EXCLUDED.tool, created_at = EXCLUDED.created_at, lease_fence = EXCLUDED.lease_fence,
           checksum = EXCLUDED.checksum
RETURNING key

-- name: ledger_claim
-- Insert-if-absent: RETURNING says whether this call inserted the key.
INSERT INTO unbroken_effects
       (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum)
SELECT %(key)s, %(run_id)s, %(call_id)s, %(tool)s, %(args_hash)s, %(status)s, %(attempts)s, %(result)s,
       %(created_at)s, %(updated_at)s, %(lease_fence)s, %(checksum)s
 WHERE %(fence)s::bigint IS NULL
    OR EXISTS (SELECT 1 FROM unbroken_runs WHERE run_id = %(run_id)s AND fence = %(fence)s::bigint)
ON CONFLICT (run_id, key) DO NOTHING
RETURNING key

-- name: ledger_get
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum
  FROM unbroken_effects WHERE run_id = %(run_id)s AND key = %(key)s

-- name: ledger_list
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum
  FROM unbroken_effects WHERE run_id = %(run_id)s ORDER BY created_at, key

-- name: ledger_newest
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum
  FROM unbroken_effects WHERE run_id = %(run_id)s ORDER BY created_at DESC, key COLLATE "C" DESC LIMIT %(limit)s

-- name: ledger_before
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum
  FROM unbroken_effects WHERE run_id = %(run_id)s AND (created_at, key COLLATE "C") < (%(at)s, %(key)s)
  ORDER BY created_at DESC, key COLLATE "C" DESC LIMIT %(limit)s

-- name: ledger_delete
DELETE FROM unbroken_effects WHERE run_id = %(run_id)s AND key = ANY(%(keys)s)

-- name: store_time
SELECT extract(epoch FROM clock_timestamp())::double precision

-- name: read_head
SELECT head_seq, fence, owner, coalesce(extract(epoch FROM lease_expires)::double precision, 0.0)
  FROM unbroken_runs WHERE run_id = %(run_id)s

-- name: create_head
INSERT INTO unbroken_runs (run_id, head_seq, fence, owner, lease_expires)
VALUES (%(run_id)s, %(seq)s, %(fence)s, %(owner)s, to_timestamp(%(expires_at)s))
ON CONFLICT (run_id) DO NOTHING

-- name: swap_head
-- Compare-and-set on the whole head; the expiry is compared as read_head returns it.
UPDATE unbroken_runs
   SET fence = %(fence)s, owner = %(owner)s,
       lease_expires = CASE WHEN %(owner)s::text IS NULL THEN NULL ELSE to_timestamp(%(expires_at)s) END
 WHERE run_id = %(run_id)s AND head_seq = %(old_seq)s AND fence = %(old_fence)s
   AND owner IS NOT DISTINCT FROM %(old_owner)s::text
   AND coalesce(extract(epoch FROM lease_expires)::double precision, 0.0) = %(old_expires_at)s

-- name: read_records_after
SELECT seq, body, checksum FROM unbroken_records WHERE run_id = %(run_id)s AND seq > %(after_seq)s ORDER BY seq

-- name: read_records_raw
SELECT seq, convert_to(body, 'UTF8'), checksum FROM unbroken_records WHERE run_id = %(run_id)s ORDER BY seq

-- name: snapshot_seq
-- One probe of the partial index unbroken_records_snapshots (backward, first row).
SELECT coalesce(max(seq), 0) FROM unbroken_records WHERE run_id = %(run_id)s AND snapshot AND seq <= %(upto_seq)s

-- name: read_records_between
SELECT seq, body, checksum FROM unbroken_records
 WHERE run_id = %(run_id)s AND seq > %(after_seq)s AND seq <= %(upto_seq)s ORDER BY seq

-- name: summaries_first
-- A page of the listing, in (updated_at, run_id) descending order: the index
-- unbroken_runs_updated_second read backward, the runs of one second at a time sorted by
-- (updated_at, run_id) (an incremental sort), until the page is full. updated_second is
-- floor(updated_at), so ordering by it first changes nothing in the order.
SELECT run_id, task, phase, turns, tokens_used, head_seq, updated_at
  FROM unbroken_runs WHERE head_seq > 0 AND updated_second IS NOT NULL
 ORDER BY updated_second DESC, updated_at DESC, run_id DESC LIMIT %(limit)s

-- name: summaries_after
-- As summaries_first, from the cursor: a row before it was updated in its second or earlier.
SELECT run_id, task, phase, turns, tokens_used, head_seq, updated_at
  FROM unbroken_runs
 WHERE head_seq > 0 AND updated_second <= floor(%(updated_at)s::double precision)
   AND (updated_at, run_id) < (%(updated_at)s, %(run_id)s)
 ORDER BY updated_second DESC, updated_at DESC, run_id DESC LIMIT %(limit)s

-- name: add_submission
-- Queue a run unless it is queued already (no row back: it was). A row made by a lease or a save
-- gets its submission; Store.submit has checked that a saved run's task is this one.
INSERT INTO unbroken_runs AS r (run_id, task, agent, submitted_at)
VALUES (%(run_id)s, %(task)s, %(agent)s, to_timestamp(%(submitted_at)s))
ON CONFLICT (run_id) DO UPDATE
   SET task = coalesce(r.task, EXCLUDED.task), agent = EXCLUDED.agent, submitted_at = EXCLUDED.submitted_at
 WHERE r.submitted_at IS NULL
RETURNING run_id

-- name: submission
SELECT run_id, task, agent, extract(epoch FROM submitted_at)::double precision
  FROM unbroken_runs WHERE run_id = %(run_id)s AND submitted_at IS NOT NULL

-- name: unstarted_page
-- Queued runs not started yet, a page at a time (on the unbroken_runs_runnable index).
SELECT run_id, task, agent, extract(epoch FROM submitted_at)::double precision
  FROM unbroken_runs
 WHERE submitted_at IS NOT NULL AND head_seq = 0 AND phase_claimable
   AND (%(after_at)s::double precision IS NULL
        OR (submitted_at, run_id) > (to_timestamp(%(after_at)s::double precision), %(after_id)s::text))
 ORDER BY submitted_at, run_id
 LIMIT %(limit)s

-- name: list_submissions
SELECT run_id, task, agent, extract(epoch FROM submitted_at)::double precision
  FROM unbroken_runs WHERE submitted_at IS NOT NULL ORDER BY submitted_at, run_id

-- name: claim_candidates
-- Workers race here: SKIP LOCKED makes each skip the rows another is claiming right now, and the
-- rows it returns stay locked until the claim's transaction ends, so the holder that Python then
-- judges (stores.backend.claimable: is it alive on this host?) cannot change before claim_picked
-- writes. phase_claimable is the generated column of schema.sql whose phase list is
-- base.UNCLAIMABLE_PHASES (a test checks it); the filter matches the unbroken_runs_runnable index
-- predicate word for word (so the planner can use the index).
-- %(seen)s: the runs this claim has already looked at (its own locks do not hide them).
SELECT run_id, head_seq, fence, owner, coalesce(extract(epoch FROM lease_expires)::double precision, 0.0),
       extract(epoch FROM clock_timestamp())::double precision
  FROM unbroken_runs
 WHERE submitted_at IS NOT NULL AND phase_claimable
   AND (%(agent)s::text IS NULL OR agent = %(agent)s::text)
   AND (owner IS NULL OR lease_expires IS NULL OR lease_expires <= clock_timestamp())
   AND run_id <> ALL(%(seen)s::text[])
 ORDER BY submitted_at, run_id
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED

-- name: claim_picked
-- Takes the leases of the runs claim_candidates locked and Python chose, in the same transaction.
-- The new fence is stores.base.next_fence: one more than the stored one, never below the
-- server's clock in us.
UPDATE unbroken_runs AS r
   SET fence = GREATEST(r.fence + 1, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
       owner = %(owner)s,
       lease_expires = clock_timestamp() + make_interval(secs => %(ttl)s)
 WHERE r.run_id = ANY(%(run_ids)s::text[])
RETURNING r.run_id, r.task, r.agent, r.fence, extract(epoch FROM r.lease_expires)::double precision

-- name: server_durability
-- What an acknowledged save depends on (checked at open and at every lease acquisition).
SELECT current_setting('fsync'), current_setting('synchronous_commit');

-- name: open_check
-- Opening a store in one round trip: the newest migration applied (an error when the schema has
-- none: the store then runs migrate) and what an acknowledged save depends on.
SELECT (SELECT max(version) FROM unbroken_migrations), current_setting('fsync'), current_setting('synchronous_commit')

-- name: append_batch
-- Saves of different runs (group commit, ``_pg_batch``), each without ledger entries, as one
-- statement, hence one transaction: each run's head advances if it is still at that save's
-- expect_seq under its fence, and only then is that save's record written, as ``append_record``
-- does for one save. RETURNING says which saves were written (the others changed nothing).
-- The arrays go in binary (%(x)b): a text array would escape every quote of every body.
-- The saves come sorted by run id and are joined in that order, so batches lock the runs they
-- share in one order.
WITH given AS (
    SELECT * FROM unnest(%(run_id)b::text[], %(seq)b::bigint[], %(expect_seq)b::bigint[], %(fence)b::bigint[],
                         %(label)b::text[], %(snapshot)b::boolean[], %(body)b::text[], %(checksum)b::text[],
                         %(task)b::text[], %(phase)b::text[], %(turns)b::integer[], %(tokens_used)b::bigint[],
                         %(updated_at)b::double precision[])
        AS g(run_id, seq, expect_seq, fence, label, snapshot, body, checksum, task, phase, turns, tokens_used,
             updated_at)
), advanced AS (
    UPDATE unbroken_runs AS r
       SET head_seq = g.seq, task = CASE WHEN r.task IS DISTINCT FROM g.task THEN g.task ELSE r.task END,
           phase = g.phase, turns = g.turns, tokens_used = g.tokens_used, updated_at = g.updated_at
      FROM given AS g
     WHERE r.run_id = g.run_id AND r.head_seq = g.expect_seq AND (g.fence IS NULL OR r.fence = g.fence)
    RETURNING g.run_id, g.seq, g.label, g.snapshot, g.body, g.checksum
)
INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum)
SELECT run_id, seq, label, snapshot, body, checksum FROM advanced
RETURNING run_id
