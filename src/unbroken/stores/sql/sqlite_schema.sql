-- unbroken's SQLite schema, version 8. Applied (in one write transaction) only when a store file is
-- new or older: opening an up-to-date file never takes the write lock. Every statement is
-- idempotent (IF NOT EXISTS), so upgrading a version 2 to 5 file runs this same script (version 3
-- added only the unbroken_append view and its trigger, version 4 only unbroken_segments; version 5
-- keys the ledger by (run_id, key): sqlite_ledger_per_run.sql rebuilds an older file's table first;
-- version 6 only adds the index unbroken_queue_order; version 7 only adds unbroken_effects.lease_fence,
-- with ALTER TABLE on an older file, before this script runs; version 8 keys unbroken_records by
-- one integer, run_no * 2^32 + seq: sqlite_records_by_key.sql rebuilds an older file's table and
-- numbers its runs first).
-- Statements end with ';' at the end of a line; the loader cuts them with sqlite3.complete_statement
-- (a trigger body holds ';').
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
    lease_expires REAL,
    -- Version 8: the run's number, given once when the row is made (from unbroken_meta's
    -- last_run_no, never reused); its records are keyed run_no * 2^32 + seq. 0: not numbered.
    run_no        INTEGER NOT NULL DEFAULT 0
);

-- The append-only log: one row per save point, written once, never updated. Version 8: keyed by
-- one integer, key = run_no * 2^32 + seq (the run's number in unbroken_runs), so a save writes
-- one b-tree (the table) instead of the table and a (run_id, seq) index: a WAL frame less per save.
-- A run's records are the key range of its number; run_id and seq stay in the row, for people.
CREATE TABLE IF NOT EXISTS unbroken_records (
    key      INTEGER PRIMARY KEY,
    run_id   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    label    TEXT    NOT NULL,
    snapshot INTEGER NOT NULL,
    checksum TEXT    NOT NULL,
    body     TEXT    NOT NULL,
    CHECK (key >> 32 > 0 AND (key & 4294967295) = seq)
);

-- Older save points packed together (version 4): records first_seq..last_seq of a run, moved here
-- from unbroken_records in one transaction once they are no longer among the run's most recent
-- (SQLiteStore keep_recent / pack_batch). bodies is "[" body "," body ... "]", each body exactly
-- as it was saved; idx is {"first":..,"checksums":[..],"lengths":[..],"snapshots":[..]}; seal is
-- the XXH3-64 of idx then bodies, written only after every record in it passed the record checks.
-- A record is in exactly one of the two tables.
CREATE TABLE IF NOT EXISTS unbroken_segments (
    run_id    TEXT    NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    idx       BLOB    NOT NULL,
    seal      TEXT    NOT NULL,
    bodies    BLOB    NOT NULL,
    PRIMARY KEY (run_id, first_seq)
);

-- The effect ledger: one row per (run, idempotency key). A key is unique within its run only, so no
-- write of one run (an imported checkpoint reusing another run's keys) can reach another's entry.
CREATE TABLE IF NOT EXISTS unbroken_effects (
    key        TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    args_hash  TEXT NOT NULL,
    status     TEXT NOT NULL,
    attempts   INTEGER NOT NULL,
    result     TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    checksum   TEXT, -- of the entry's JSON, checked on every read (NULL: written by store schema 1)
    lease_fence INTEGER, -- the lease fence the attempt started under (NULL: before schema 7, or no lease)
    PRIMARY KEY (run_id, key)
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
-- Version 6: queued runs are listed and claimed a page at a time, oldest first.
CREATE INDEX IF NOT EXISTS unbroken_queue_order ON unbroken_queue (submitted_at, run_id);
-- A save in ONE autocommitted statement (what SQLiteStore.write_record does for an existing run
-- with no ledger entries): INSERT INTO unbroken_append (...) VALUES (...). The trigger moves the
-- run's head and summary only if the head is at expect_seq and, when fence is not NULL, the
-- fence matches; otherwise RAISE(ABORT) undoes the whole statement (nothing written). Then it
-- inserts the record. The statement is its own transaction, so the head and the record commit
-- together, in fewer round trips than BEGIN IMMEDIATE + UPDATE + INSERT + COMMIT. The view
-- never holds rows (WHERE 0); it only names the statement's columns.
CREATE VIEW IF NOT EXISTS unbroken_append AS
    SELECT run_id, seq, label, snapshot, body, checksum,
           NULL AS expect_seq, NULL AS fence, NULL AS task, NULL AS phase, NULL AS turns,
           NULL AS tokens_used, NULL AS updated_at
    FROM unbroken_records WHERE 0;

CREATE TRIGGER IF NOT EXISTS unbroken_append_insert INSTEAD OF INSERT ON unbroken_append
BEGIN
    UPDATE unbroken_runs
       SET head_seq = NEW.seq, task = NEW.task, phase = NEW.phase, turns = NEW.turns,
           tokens_used = NEW.tokens_used, updated_at = NEW.updated_at
     WHERE run_id = NEW.run_id AND head_seq = NEW.expect_seq AND (NEW.fence IS NULL OR fence = NEW.fence);
    SELECT RAISE(ABORT, 'unbroken: refused') WHERE changes() = 0;
    INSERT INTO unbroken_records (key, run_id, seq, label, snapshot, checksum, body)
    SELECT run_no * 4294967296 + NEW.seq, NEW.run_id, NEW.seq, NEW.label, NEW.snapshot, NEW.checksum, NEW.body
      FROM unbroken_runs WHERE run_id = NEW.run_id;
END;

INSERT OR IGNORE INTO unbroken_meta (key, value) VALUES ('store_schema', '8');
-- Version 8: the last run number given (unbroken_runs.run_no); numbers are never reused.
INSERT OR IGNORE INTO unbroken_meta (key, value) VALUES ('last_run_no', '0');
