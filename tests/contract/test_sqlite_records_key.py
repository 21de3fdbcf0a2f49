"""Store schema 8: SQLite keys a run's records by one integer, ``run_no * 2^32 + seq``.

A save then writes one b-tree for its record (the table) instead of two (the table and a
``(run_id, seq)`` index). What this must not change: every record an older file holds is kept
as it was, a run's reads see only its own records, a run number is never given twice, and a
file upgraded in place has the schema a new file has.

``data/sqlite_store_schema7.sql`` is a dump of a store that the schema-7 code (the parent of the
commit adding schema 8) wrote with ``RunWriter``: run ``v7-packed`` (22 saves under a lease, 16
packed into two segments of 8, 6 loose), run ``v7-other`` (3 saves), and a run deleted between
them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from unbroken.stores.sqlite import SQLiteStore
from unbroken.testing.contract import RunWriter

SCHEMA7_DUMP = Path(__file__).parent / "data" / "sqlite_store_schema7.sql"
RECORD_COLUMNS = "run_id, seq, label, snapshot, checksum, body"


def schema7_file(tmp_path: Path, *, extra_sql: str = "") -> Path:
    path = tmp_path / "v7.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA7_DUMP.read_text() + extra_sql)
    conn.execute("PRAGMA journal_mode=WAL")  # as the schema-7 code left its files
    conn.close()
    return path


def query(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def every_record(path: Path) -> list[tuple[Any, ...]]:
    return query(path, f"SELECT {RECORD_COLUMNS} FROM unbroken_records ORDER BY run_id, seq")


def test_an_upgraded_file_keeps_every_record_and_segment_as_it_was(tmp_path: Path) -> None:
    path = schema7_file(tmp_path)
    records = every_record(path)
    segments = query(path, "SELECT * FROM unbroken_segments ORDER BY run_id, first_seq")
    assert len(records) == 9 and len(segments) == 2
    store = SQLiteStore(path, keep_recent=4, pack_batch=8)
    try:
        assert query(path, "SELECT value FROM unbroken_meta WHERE key='store_schema'") == [("8",)]
        assert every_record(path) == records  # each column of each row, byte for byte
        assert query(path, "SELECT * FROM unbroken_segments ORDER BY run_id, first_seq") == segments
        keys = query(path, "SELECT r.key, u.run_no, r.seq FROM unbroken_records r JOIN unbroken_runs u USING (run_id)")
        assert all(key == (run_no << 32) + seq for key, run_no, seq in keys)
        assert [r.seq for r in store.read_records("v7-packed")] == list(range(1, 23))
        assert [r.seq for r in store.read_records("v7-other")] == [1, 2, 3]
        assert store.load("v7-packed").save_seq == 22
        assert store.decode("v7-other").state.save_seq == 3
    finally:
        store.close()


def test_an_upgraded_run_goes_on_saving_packing_and_refusing_stale_writes(tmp_path: Path) -> None:
    path = schema7_file(tmp_path)
    store = SQLiteStore(path, keep_recent=4, pack_batch=8)
    try:
        lease = store.acquire_lease("v7-packed", "worker-2", 60.0, takeover_from="worker-1")
        writer = RunWriter(store, "v7-packed")
        writer.state = store.load("v7-packed")
        writer.encoder.prime(writer.state)
        for step in range(23, 37):  # 32 and 36: packs
            writer.turn(step, fence=lease.fence)
        assert store.load("v7-packed") == writer.state
        assert [r.seq for r in store.read_records("v7-packed")] == list(range(1, 37))
        assert query(path, "SELECT count(*) FROM unbroken_segments WHERE run_id='v7-packed'")[0][0] > 2
        assert [r.seq for r in store.read_records("v7-other")] == [1, 2, 3]  # untouched by the other run
    finally:
        store.close()


def test_records_a_run_has_without_its_row_are_kept_and_read(tmp_path: Path) -> None:
    """No store writes records without the run's row; if a file holds some anyway, the upgrade
    gives the run a row at head 0 (and a number) instead of dropping them."""
    path = schema7_file(tmp_path, extra_sql="DELETE FROM unbroken_runs WHERE run_id='v7-other';")
    records = every_record(path)
    store = SQLiteStore(path)
    try:
        assert every_record(path) == records
        assert query(path, "SELECT head_seq, run_no > 0 FROM unbroken_runs WHERE run_id='v7-other'") == [(0, 1)]
        assert [r.seq for r in store.backend.records_after("v7-other", 0)] == [1, 2, 3]
    finally:
        store.close()


def test_run_numbers_are_never_given_twice(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        RunWriter(store, "first").turn(1)
        RunWriter(store, "second").turn(1)
        numbers = dict(query(store.path, "SELECT run_id, run_no FROM unbroken_runs"))
        store.delete_run("second")  # the highest number: a max() + 1 would give it again
        RunWriter(store, "third").turn(1)
        third = query(store.path, "SELECT run_no FROM unbroken_runs WHERE run_id='third'")[0][0]
        assert third > max(numbers.values())
        assert [r.seq for r in store.read_records("third")] == [1]
        leased = store.acquire_lease("fourth", "worker", 60.0)  # a row made by the lease, before any save
        RunWriter(store, "fourth").turn(1, fence=leased.fence)
        fourth = query(store.path, "SELECT run_no FROM unbroken_runs WHERE run_id='fourth'")[0][0]
        assert fourth > third
    finally:
        store.close()


def test_a_record_key_that_does_not_match_its_seq_is_refused_by_the_table(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        RunWriter(store, "r").turn(1)
        conn = sqlite3.connect(store.path)
        try:
            for key in (5, (1 << 32) + 7):  # no run number; a seq the key does not hold
                try:
                    conn.execute(
                        f"INSERT INTO unbroken_records (key, {RECORD_COLUMNS}) VALUES (?, 'r', 2, 'x', 0, 'c', 'b')",
                        (key,),
                    )
                except sqlite3.IntegrityError as exc:
                    assert "CHECK constraint failed" in str(exc)
                else:
                    raise AssertionError(f"key {key} was accepted")
        finally:
            conn.close()
    finally:
        store.close()


def schema_of(path: Path) -> dict[str, Any]:
    """What a store's code relies on: each table's columns (name, type, not null, default,
    primary key), each index's columns, and the text of views and triggers."""
    tables = [name for (name,) in query(path, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    shape: dict[str, Any] = {}
    for table in tables:
        shape[table] = query(path, f"PRAGMA table_info({table})")
        for _, index, unique, *_ in query(path, f"PRAGMA index_list({table})"):
            shape[index] = (unique, query(path, f"PRAGMA index_info({index})"))
    for kind, name, sql in query(path, "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger')"):
        shape[f"{kind} {name}"] = " ".join(sql.split())
    checks = query(path, "SELECT sql FROM sqlite_master WHERE name='unbroken_records'")[0][0]
    shape["records check"] = " ".join(checks[checks.index("CHECK") :].split())
    return shape


def test_a_file_upgraded_in_place_has_the_schema_of_a_new_file(tmp_path: Path) -> None:
    upgraded = schema7_file(tmp_path)
    SQLiteStore(upgraded).close()
    fresh = tmp_path / "fresh.db"
    SQLiteStore(fresh).close()
    assert schema_of(upgraded) == schema_of(fresh)
    assert query(fresh, "PRAGMA index_list(unbroken_records)") == []  # one b-tree: the save writes no index


def test_no_read_or_delete_of_records_scans_the_table(tmp_path: Path) -> None:
    """Every statement the store runs on ``unbroken_records`` (saves, packs, every read, a rewrite, a
    delete) searches the integer key: ``WHERE run_id = ?`` alone would still answer, by a scan of
    every run's records, so a query written that way is caught here."""
    store = SQLiteStore(tmp_path / "runs.db", keep_recent=4, pack_batch=8)
    statements: list[str] = []
    try:
        store.backend.conn.set_trace_callback(statements.append)
        writer = RunWriter(store, "r")
        for step in range(1, 41):
            writer.turn(step)
        RunWriter(store, "other").turn(1)
        assert store.load("r") == writer.state
        assert store.decode("r").state == writer.state
        assert [record.seq for record in store.records_since("r", 30)] == list(range(31, 41))
        assert [record.seq for record in store.records_in("r", 10, 20)] == list(range(11, 21))
        store.newest_snapshot("r", 39)
        store.history("r")
        store.delete_run("other")
        store.backend.conn.set_trace_callback(None)
    finally:
        store.close()
    reads = {sql for sql in statements if "unbroken_records" in sql and not sql.lstrip().upper().startswith("INSERT")}
    assert len(reads) >= 5
    conn = sqlite3.connect(tmp_path / "runs.db")
    try:
        for sql in reads:
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            assert not [step for step in plan if step.startswith("SCAN")], (sql, plan)
            assert [step for step in plan if "USING INTEGER PRIMARY KEY" in step], (sql, plan)
    finally:
        conn.close()
