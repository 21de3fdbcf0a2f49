-- Upgrade to store schema 5, for a file of schema 1 to 4 (its unbroken_effects keyed by key alone):
-- the ledger table is rebuilt keyed by (run_id, key), in the one write transaction of the upgrade.
-- SQLite cannot change a table's primary key in place, hence copy, drop, rename. Every row is kept
-- as it was (a key unique in the whole store is unique in its run). sqlite_schema.sql runs next and
-- recreates the index dropped with the old table.
CREATE TABLE unbroken_effects_v5 (
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
    PRIMARY KEY (run_id, key)
);
INSERT INTO unbroken_effects_v5 (key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, checksum)
SELECT key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, checksum
  FROM unbroken_effects;
DROP TABLE unbroken_effects;
ALTER TABLE unbroken_effects_v5 RENAME TO unbroken_effects;
