-- unbroken's PostgreSQL schema as of the latest migration, for a fresh schema in one step.
-- A test checks that it equals what applying every file in migrations/ in order produces:
-- change both together.
CREATE TABLE unbroken_runs (
    run_id        text PRIMARY KEY,
    task          text,
    phase         text,
    turns         integer NOT NULL DEFAULT 0,
    tokens_used   bigint  NOT NULL DEFAULT 0,
    head_seq      bigint  NOT NULL DEFAULT 0,
    updated_at    double precision,
    fence         bigint  NOT NULL DEFAULT 0,
    owner         text,
    lease_expires timestamptz,
    agent         text,
    submitted_at  timestamptz,
    -- What the indexes read is derived (0008), so that an ordinary save, which changes updated_at
    -- and phase, changes no indexed column and updates the row in place (a HOT update).
    -- updated_at cut to the second: the listing's index key.
    updated_second double precision GENERATED ALWAYS AS (floor(updated_at)) STORED,
    -- the phase is not one of base.UNCLAIMABLE_PHASES (a test checks the list): the claim index's filter
    phase_claimable boolean GENERATED ALWAYS AS (
        phase IS NULL OR phase NOT IN ('awaiting_approval', 'completed', 'failed', 'max_turns', 'paused')) STORED
) WITH (fillfactor = 80);
CREATE INDEX unbroken_runs_runnable ON unbroken_runs (submitted_at, run_id) WHERE submitted_at IS NOT NULL AND phase_claimable;
CREATE INDEX unbroken_runs_updated_second ON unbroken_runs (updated_second) WHERE updated_second IS NOT NULL;

-- The append-only log: one row per save point, written once, never updated.
CREATE TABLE unbroken_records (
    run_id   text    NOT NULL,
    seq      bigint  NOT NULL,
    label    text    NOT NULL,
    snapshot boolean NOT NULL,
    body     text    NOT NULL,
    checksum text    NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX unbroken_records_snapshots ON unbroken_records (run_id, seq) WHERE snapshot;

-- The effect ledger: one row per (run, idempotency key); a key is unique within its run only.
CREATE TABLE unbroken_effects (
    key        text NOT NULL,
    run_id     text NOT NULL,
    call_id    text NOT NULL,
    tool       text NOT NULL,
    args_hash  text NOT NULL,
    status     text NOT NULL,
    attempts   integer NOT NULL,
    result     text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    checksum   text,
    lease_fence bigint, -- the lease fence the attempt started under (0007; NULL: before, or no lease)
    PRIMARY KEY (run_id, key)
);
CREATE INDEX unbroken_effects_run ON unbroken_effects (run_id, created_at);
