"""Paged reads touch only their range (issue 16), shown per store where it can be shown honestly:
the older part of a run is made unreadable behind the store's back (file, S3, Redis), so a
read of a later range works while a read of the whole run fails; or the query plan names the
index (SQLite, PostgreSQL). Exactness is the contract's job (``PagingContract``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_store_contract import open_postgres, open_redis, open_s3

from unbroken.acceptance import run_seed
from unbroken.codec import StoredRecord, checksum
from unbroken.errors import CorruptCheckpoint, StoreUnavailable
from unbroken.state import RunSummary
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.stores.files import FileStore
from unbroken.testing.contract import RunWriter

if TYPE_CHECKING:
    from unbroken.stores.s3 import S3Store

SAVES = 300


def _long_run(store: Store, run_id: str = "run-long") -> dict[int, tuple[str, str]]:
    """300 saves, a snapshot every 16th (1, 17, ..., 273, 289): the stores that pack old records
    (file, S3) have packed them."""
    run = RunWriter(store, run_id, snapshot_every=16)
    return {
        save.seq: (save.body_bytes().decode(), save.checksum)
        for save in (run.turn(step) for step in range(1, SAVES + 1))
    }


SEED = run_seed("run-long")
"""Every run of these tests is ``run-long``: its records' checksums start from its seed."""


def _intact(records: list[StoredRecord], written: dict[int, tuple[str, str]]) -> list[int]:
    """The seqs read, each checked against what was written."""
    for record in records:
        body = record.body.decode() if isinstance(record.body, bytes) else record.body
        assert (body, record.checksum) == written[record.seq] and checksum(body, SEED) == record.checksum
    return [record.seq for record in records]


def test_file_store_reads_a_later_range_without_opening_the_older_segment_or_records(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/store")
    assert isinstance(store, FileStore)
    written = _long_run(store)
    records = store.backend.root / "runs" / "run-long" / "records"
    segments = sorted(records.glob("segment-*.json"))
    assert [path.name for path in segments] == ["segment-000000000001-000000000256.json"]
    # Unreadable by anyone (root too): the segment and an older loose record become directories.
    for path in (segments[0], records / "000000000260.json"):
        path.unlink()
        path.mkdir()

    with pytest.raises(StoreUnavailable):
        store.backend.records_after("run-long", 0)  # the whole run needs them: the damage is real

    assert _intact(store.backend.records_between("run-long", 260, 300), written) == list(range(261, 301))
    assert _intact(store.backend.records_between("run-long", 270, 275), written) == list(range(271, 276))
    assert store.newest_snapshot("run-long") == 289 and store.newest_snapshot("run-long", 288) == 273
    store.close()


def test_s3_store_reads_a_later_range_without_the_older_segments(tmp_path: Path) -> None:
    from unbroken.stores.s3 import S3Store

    store = open_s3(tmp_path)
    written = _long_run(store)
    assert isinstance(store, S3Store)
    head = json_head(store, "run-long")
    oldest = head["segments"][0]
    assert int(oldest[0]) == 1 and int(oldest[1]) >= 128  # packed and merged
    store.backend.objects.delete([str(oldest[2])])  # gone behind the store's back

    whole = store.backend.records_after("run-long", 0)
    assert any(checksum(record.body) != record.checksum for record in whole)  # the damage is real

    later = int(oldest[1])
    assert _intact(store.backend.records_between("run-long", later, SAVES), written) == list(
        range(later + 1, SAVES + 1)
    )
    assert _intact(store.backend.records_between("run-long", later + 5, later + 9), written) == list(
        range(later + 6, later + 10)
    )
    assert store.newest_snapshot("run-long") == 289
    store.close()


def json_head(store: S3Store, run_id: str) -> dict[str, Any]:
    found = store.backend.objects.get(f"runs/{run_id}/head")
    assert found is not None
    head: dict[str, Any] = json.loads(found[0])
    return head


def test_redis_store_reads_a_later_range_without_reading_older_records(tmp_path: Path) -> None:
    store = open_redis(tmp_path)
    written = _long_run(store)
    client, key = store.backend._client, store.backend._key("rec", "run-long")  # type: ignore[attr-defined]
    client.lset(key, 5, b"not a record")  # the element of save 6 no longer parses

    with pytest.raises(CorruptCheckpoint, match="damaged header"):
        store.backend.records_after("run-long", 0)  # the whole run needs it: the damage is real, and typed
    with pytest.raises(CorruptCheckpoint):
        store.load("run-long")

    assert _intact(store.backend.records_between("run-long", 7, 40), written) == list(range(8, 41))
    assert _intact(store.backend.records_between("run-long", 250, 260), written) == list(range(251, 261))
    assert store.newest_snapshot("run-long", 40) == 33
    store.close()


def test_sqlite_paged_reads_search_the_records_key_and_never_scan_the_table(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    written = _long_run(store)
    statements: list[str] = []
    store.backend.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]

    assert _intact(store.backend.records_between("run-long", 100, 110), written) == list(range(101, 111))
    assert store.newest_snapshot("run-long", 280) == 273
    store.backend.conn.set_trace_callback(None)  # type: ignore[attr-defined]

    reads = [sql for sql in statements if "unbroken_records" in sql]
    assert len(reads) == 2
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        for sql in reads:
            plan = " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            # store schema 8: the run's row by its key, then a range of the records' integer key
            assert "SEARCH r USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in plan, plan
            assert "SEARCH u USING INDEX sqlite_autoindex_unbroken_runs_1 (run_id=?)" in plan, plan
            assert "SCAN" not in plan and "TEMP B-TREE" not in plan, plan
    conn.close()
    store.close()


def test_postgres_paged_reads_use_their_indexes(tmp_path: Path) -> None:
    import psycopg

    from unbroken.stores.postgres import PostgresStore, Q

    store = open_postgres(tmp_path)
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.backend.settings.conninfo, autocommit=True) as conn:  # bulk rows, behind the store
        conn.execute(
            "INSERT INTO unbroken_runs (run_id, task, phase, head_seq, updated_at) "
            "SELECT 'run-' || n, 't', 'running', 1, 1000 + n % 97 FROM generate_series(1, 20000) AS n"
        )
        conn.execute(
            "INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum) "
            "SELECT 'run-' || (n % 50), n, 'x', n % 40 = 1, repeat('b', 200), 'c' FROM generate_series(1, 100000) AS n"
        )
        conn.execute("ANALYZE unbroken_runs")
        conn.execute("ANALYZE unbroken_records")
        checks: list[tuple[str, dict[str, Any], str]] = [
            ("read_records_between", {"run_id": "run-7", "after_seq": 5000, "upto_seq": 5600}, "unbroken_records_pkey"),
            ("snapshot_seq", {"run_id": "run-7", "upto_seq": 60000}, "unbroken_records_snapshots"),
            ("summaries_first", {"limit": 50}, "unbroken_runs_updated_second"),
            ("summaries_after", {"limit": 50, "updated_at": 1050.0, "run_id": "run-9"}, "unbroken_runs_updated_second"),
        ]
        for name, params, index in checks:
            plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {Q[name]}", params))
            assert index in plan and "Seq Scan" not in plan, (name, plan)
            if name == "read_records_between":  # the range is in the index condition
                assert "seq > " in plan and "seq <= " in plan, plan
            if name.startswith("summaries"):  # read in index order: no sort of every run,
                # only of the runs updated in one second at a time (the index key, migration 0008)
                assert "Limit" in plan and "Incremental Sort" in plan, plan
                assert "Presorted Key: updated_second" in plan and plan.count("Sort Key") == 1, plan
    assert [row.run_id for row in store.backend.summaries_page((1096.0, "run-9991"), 2)] == _expected_page(
        store, 1096.0
    )
    assert [row.run_id for row in store.backend.summaries_page(None, 3)] == _expected_page(store, None)
    store.close()


def _expected_page(store: Store, updated_at: float | None) -> list[str]:
    rows: list[RunSummary] = sorted(
        store.backend.list_summaries(), key=lambda r: (r.updated_at, r.run_id), reverse=True
    )
    if updated_at is None:
        return [r.run_id for r in rows][:3]
    return [r.run_id for r in rows if (r.updated_at, r.run_id) < (updated_at, "run-9991")][:2]


def test_sqlite_ledger_pages_search_the_ledger_index_newest_first(tmp_path: Path) -> None:
    from unbroken.testing.contract._support import ledger_entry

    store = open_store(f"sqlite:///{tmp_path}/runs.db")
    for number in range(40):
        store.ledger_claim(ledger_entry("run-ledger", f"call_{number:02d}", created_at=1000.0 + number))
    statements: list[str] = []
    store.backend.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    newest = store.ledger_page("run-ledger", limit=5)
    older = store.ledger_page("run-ledger", before=(newest[-1].created_at, newest[-1].key), limit=5)
    store.backend.conn.set_trace_callback(None)  # type: ignore[attr-defined]

    assert [entry.created_at for entry in newest + older] == [1039.0 - n for n in range(10)]
    reads = [sql for sql in statements if "unbroken_effects" in sql]
    assert len(reads) == 2
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        for sql in reads:
            plan = " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "SEARCH unbroken_effects USING INDEX unbroken_effects_run" in plan, plan
            # ties of created_at are ordered by key as they come (a sort of the ties, not of the run)
            assert "SCAN" not in plan and plan.count("TEMP B-TREE") <= plan.count("RIGHT PART"), plan
    conn.close()
    store.close()


def test_postgres_ledger_pages_use_the_ledger_index(tmp_path: Path) -> None:
    import psycopg

    from unbroken.stores.postgres import PostgresStore, Q

    store = open_postgres(tmp_path)
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.backend.settings.conninfo, autocommit=True) as conn:  # bulk rows, behind the store
        conn.execute(
            "INSERT INTO unbroken_effects (key, run_id, call_id, tool, args_hash, status, attempts, created_at, "
            "updated_at) SELECT 'k' || n, 'run-' || (n % 50), 'c', 't', 'h', 'done', 1, 1000 + n, 1000 + n "
            "FROM generate_series(1, 100000) AS n"
        )
        conn.execute("ANALYZE unbroken_effects")
        checks: list[tuple[str, dict[str, Any]]] = [
            ("ledger_newest", {"run_id": "run-7", "limit": 100}),
            ("ledger_before", {"run_id": "run-7", "at": 50000.0, "key": "k49000", "limit": 100}),
        ]
        for name, params in checks:
            plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {Q[name]}", params))
            assert "unbroken_effects_run" in plan and "Seq Scan" not in plan and "Limit" in plan, (name, plan)
    page = store.ledger_page("run-7", limit=3)
    assert [entry.key for entry in page] == ["k99957", "k99907", "k99857"]
    store.close()
