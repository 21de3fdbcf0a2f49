-- unbroken's SQLite schema, version 2. Applied (in one write transaction) only when a store file is
-- new or older: opening an up-to-date file never takes the write lock.
-- One row per run: the cheap summary for listings, plus the lease (owner, fence, expiry).
CREATE TABLE IF NOT EXISTS unbroken_runs (
    run_id        TEXT PRIMARY KEY,
    task          TEXT,
    phase         TEXT,
    turns         INTEGER NOT NULL DEFAULT 0,
    tokens_used   INTEGER NOT NULL DEFAULT 0,
    head_seq      INTEGER NOT NULL DEFAULT 0,
    updated_at    REAL,
    fence         INTEGER NOT NULL DEFAULT 0,
    owner         TEXT,
    lease_expires REAL
);

-- The append-only log: one row per save point, written once, never updated.
CREATE TABLE IF NOT EXISTS unbroken_records (
    run_id   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    label    TEXT    NOT NULL,
    snapshot INTEGER NOT NULL,
    body     TEXT    NOT NULL,
    checksum TEXT    NOT NULL,
    UNIQUE (run_id, seq)
);

-- The effect ledger: one row per idempotency key.
CREATE TABLE IF NOT EXISTS unbroken_effects (
    key        TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    args_hash  TEXT NOT NULL,
    status     TEXT NOT NULL,
    attempts   INTEGER NOT NULL,
    result     TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    checksum   TEXT -- of the entry's JSON, checked on every read (NULL: written by store schema 1)
);
CREATE INDEX IF NOT EXISTS unbroken_effects_run ON unbroken_effects (run_id, created_at);

CREATE TABLE IF NOT EXISTS unbroken_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Runs submitted for workers to claim.
CREATE TABLE IF NOT EXISTS unbroken_queue (
    run_id       TEXT PRIMARY KEY,
    task         TEXT NOT NULL,
    agent        TEXT,
    submitted_at REAL NOT NULL
);
INSERT OR IGNORE INTO unbroken_meta (key, value) VALUES ('store_schema', '2');
