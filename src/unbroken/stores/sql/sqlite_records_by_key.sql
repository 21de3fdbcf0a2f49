-- Upgrade to store schema 8, for a file of schema 1 to 7 (its unbroken_records keyed by a rowid
-- plus a UNIQUE (run_id, seq) index): every run gets its number (its rowid in unbroken_runs, and
-- unbroken_meta's last_run_no the highest), a run that has records but no row (none should)
-- gets a row at head 0, and the records table is rebuilt keyed by run_no * 2^32 + seq, in the one
-- write transaction of the upgrade. Every record is copied as it was (run_id, seq, label,
-- snapshot, checksum, body). The append view and its trigger are dropped first (they name the
-- old table) and sqlite_schema.sql, which runs next, makes them again for the new one.
DROP TRIGGER IF EXISTS unbroken_append_insert;
DROP VIEW IF EXISTS unbroken_append;
ALTER TABLE unbroken_runs ADD COLUMN run_no INTEGER NOT NULL DEFAULT 0;
INSERT OR IGNORE INTO unbroken_runs (run_id) SELECT DISTINCT run_id FROM unbroken_records;
UPDATE unbroken_runs SET run_no = rowid;
INSERT OR REPLACE INTO unbroken_meta (key, value)
SELECT 'last_run_no', CAST(IFNULL(MAX(run_no), 0) AS TEXT) FROM unbroken_runs;
CREATE TABLE unbroken_records_v8 (
    key      INTEGER PRIMARY KEY,
    run_id   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    label    TEXT    NOT NULL,
    snapshot INTEGER NOT NULL,
    checksum TEXT    NOT NULL,
    body     TEXT    NOT NULL,
    CHECK (key >> 32 > 0 AND (key & 4294967295) = seq)
);
INSERT INTO unbroken_records_v8 (key, run_id, seq, label, snapshot, checksum, body)
SELECT u.run_no * 4294967296 + r.seq, r.run_id, r.seq, r.label, r.snapshot, r.checksum, r.body
  FROM unbroken_records r JOIN unbroken_runs u ON u.run_id = r.run_id
 ORDER BY u.run_no, r.seq;
DROP TABLE unbroken_records;
ALTER TABLE unbroken_records_v8 RENAME TO unbroken_records;
