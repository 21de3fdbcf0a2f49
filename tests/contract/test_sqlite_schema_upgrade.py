"""A SQLite store file written by store schema 2 keeps working: opening it upgrades it in place
(one write transaction adds the one-statement save path), and its runs load, save, refuse stale
or fenced-out writes, and report a missing tail exactly as before.

The file comes from ``data/sqlite_store_schema2.sql``: a dump of a store that the schema-2 code
(git c66619e) wrote with ``RunWriter`` turns, a lease and ``ledger_claim``.
"""

from __future__ import annotations

import copy
import dataclasses
import sqlite3
from pathlib import Path

import pytest

from unbroken import ConcurrentSave, CorruptCheckpoint, LeaseLost, open_store
from unbroken.stores.sqlite import STORE_SCHEMA, SQLiteStore
from unbroken.testing.contract import RunWriter

DUMP = Path(__file__).parent / "data" / "sqlite_store_schema2.sql"


def schema2_file(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(DUMP.read_text())
    conn.execute("PRAGMA journal_mode=WAL")  # as the schema-2 code left its files
    conn.close()
    return path


def meta_schema(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("SELECT value FROM unbroken_meta WHERE key='store_schema'").fetchone()[0])


def continue_run(store: SQLiteStore, run_id: str) -> RunWriter:
    writer = RunWriter(store, run_id)
    writer.state = store.load(run_id)
    writer.encoder.prime(writer.state)
    return writer


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_a_schema_2_file_is_upgraded_in_place_and_its_runs_continue(tmp_path: Path, durability: str) -> None:
    path = schema2_file(tmp_path)
    assert meta_schema(path) == "2"
    store = open_store(f"sqlite:///{path}?durability={durability}")
    assert isinstance(store, SQLiteStore)
    try:
        assert meta_schema(path) == str(STORE_SCHEMA) == "8"
        assert {row.run_id: row.turns for row in store.list_runs()} == {"leased-run": 5, "free-run": 2}
        state = store.load("leased-run")
        assert (state.save_seq, state.turns, len(state.messages)) == (5, 5, 5)
        assert [entry.key for entry in store.ledger_list("leased-run")] == ["ub_old_key"]

        lease = store.acquire_lease("leased-run", "worker-2", 60.0)
        assert lease.fence > 1 and lease.previous_fence == 1
        writer = continue_run(store, "leased-run")
        writer.turn(6, fence=lease.fence)  # the one-statement save, on the upgraded file
        saved = copy.deepcopy(writer.state)
        with pytest.raises(LeaseLost):
            writer.turn(7, fence=1)  # the old fence is refused, nothing written
        head = store.backend.read_head("leased-run")
        assert head is not None and head.seq == 6
        stale = RunWriter(store, "free-run")
        stale.state.save_seq = 1  # a writer that missed save 2
        with pytest.raises(ConcurrentSave):
            stale.turn(9)

        free = continue_run(store, "free-run")
        free.turn(3)
        summaries = {row.run_id: (row.turns, row.save_seq, row.phase) for row in store.list_runs()}
        assert summaries["leased-run"][:2] == (6, 6) and summaries["free-run"][:2] == (3, 3)
        assert store.load("leased-run") == saved
        assert store.load("free-run") == free.state
    finally:
        store.close()

    # A missing tail (the newest records deleted by hand) is still caught against the head.
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM unbroken_records WHERE run_id='leased-run' AND seq >= 5")
    store = open_store(f"sqlite:///{path}?durability={durability}")
    try:
        with pytest.raises(CorruptCheckpoint, match="missing"):
            store.load("leased-run")
    finally:
        store.close()


def test_opening_an_upgraded_file_again_takes_no_write_lock(tmp_path: Path) -> None:
    path = schema2_file(tmp_path)
    open_store(f"sqlite:///{path}").close()  # upgrades
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        store = open_store(f"sqlite:///{path}")
        assert store.load("free-run").turns == 2
        store.close()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


SCHEMA3_DUMP = Path(__file__).parent / "data" / "sqlite_store_schema3.sql"
"""A store that the schema-3 code (git 8a52e43) wrote: run ``long-run``, 330 ``RunWriter`` turns,
every record one row (schema 3 had no segments)."""


def schema3_file(tmp_path: Path) -> Path:
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA3_DUMP.read_text())
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return path


def counts(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as conn:
        loose = conn.execute("SELECT count(*) FROM unbroken_records").fetchone()[0]
        packed = conn.execute("SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM unbroken_segments").fetchone()[0]
    return int(loose), int(packed)


def test_a_schema_3_file_is_upgraded_and_its_long_run_is_packed_as_it_goes_on(tmp_path: Path) -> None:
    path = schema3_file(tmp_path)
    assert meta_schema(path) == "3"
    store = SQLiteStore(path, keep_recent=32, pack_batch=64)
    try:
        assert meta_schema(path) == "8"
        with sqlite3.connect(path) as conn:  # schema 6: the queue's page index
            assert conn.execute("SELECT 1 FROM sqlite_master WHERE name='unbroken_queue_order'").fetchone()
        conn.close()
        assert counts(path) == (330, 0)  # upgrading moves nothing
        before = store.load("long-run")
        assert (before.save_seq, before.turns, len(before.messages)) == (330, 330, 330)
        writer = continue_run(store, "long-run")
        for step in range(331, 353):  # save 352 is a multiple of keep_recent: the first pack
            writer.turn(step)
        loose, packed = counts(path)
        assert loose + packed == 352
        # Caught up a few segments a pack (MAX_SEGMENTS_A_PACK), never in one long transaction.
        assert packed == 4 * 64
        state = store.load("long-run")
        assert state == writer.state
        assert store.decode("long-run").state == state  # the careful path agrees
        assert [record.seq for record in store.read_records("long-run")] == list(range(1, 353))
    finally:
        store.close()


def test_a_newer_file_is_refused_by_code_that_does_not_know_its_schema(tmp_path: Path) -> None:
    """What an older unbroken does with a newer file (checked against the rule in _connect):
    a store schema it does not know is refused, nothing is changed."""
    path = schema3_file(tmp_path)
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE unbroken_meta SET value=? WHERE key='store_schema'", (str(STORE_SCHEMA + 1),))
    conn.close()
    from unbroken.errors import IncompatibleSchema

    with pytest.raises(IncompatibleSchema, match=f"store schema {STORE_SCHEMA + 1}"):
        SQLiteStore(path)


SCHEMA4_DUMP = Path(__file__).parent / "data" / "sqlite_store_schema4.sql"
"""A store that the schema-4 code (git 5e0aa34) wrote: run ``packed-run`` (40 ``RunWriter`` saves,
32 of them packed in two segments, keep_recent=8 and pack_batch=16), whose save 3 carried the
ledger entry ``ub_shared_key`` and which then claimed ``ub_claimed_key`` under a lease (fence 1);
run ``other-run`` (2 saves). Its ledger is keyed by ``key`` alone."""


def schema4_file(tmp_path: Path) -> Path:
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA4_DUMP.read_text())
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return path


def ledger_key_columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("PRAGMA table_info(unbroken_effects)").fetchall()
    conn.close()
    return [name for _, name, *_, pk in sorted(rows, key=lambda row: row[-1]) if pk]


def test_a_schema_4_file_gets_its_ledger_keyed_by_run_and_keeps_every_entry(tmp_path: Path) -> None:
    path = schema4_file(tmp_path)
    assert meta_schema(path) == "4" and ledger_key_columns(path) == ["key"]
    store = SQLiteStore(path, keep_recent=8, pack_batch=16)
    try:
        assert meta_schema(path) == "8" and ledger_key_columns(path) == ["run_id", "key"]
        packed = store.ledger_list("packed-run")  # checksums checked: the rows were copied unchanged
        assert [(e.key, e.status) for e in packed] == [("ub_shared_key", "succeeded"), ("ub_claimed_key", "pending")]
        assert packed[0].result is not None and packed[0].result.content == "charged 5"
        state = store.load("packed-run")
        assert (state.save_seq, len(state.messages)) == (40, 40)
        assert store.decode("packed-run").state == state

        # The same key in another run is now that run's own entry; the first run's is untouched.
        other = continue_run(store, "other-run")
        reused = dataclasses.replace(packed[0], run_id="other-run", tool="other", created_at=2000.0)
        other.save("reuses a key", ledger=[reused])
        assert store.ledger_list("packed-run") == packed
        assert store.ledger_list("other-run") == [reused]
        lease = store.acquire_lease("packed-run", "worker-2", 60.0, takeover_from="worker-1")
        assert lease.fence > 1 and lease.previous_fence == 1
        writer = continue_run(store, "packed-run")
        writer.turn(41, fence=lease.fence)
        assert store.load("packed-run") == writer.state
    finally:
        store.close()


SCHEMA6_DUMP = Path(__file__).parent / "data" / "sqlite_store_schema6.sql"
"""A store that the schema-6 code (the parent of the commit adding schema 7) wrote: run ``v6-run``,
3 ``RunWriter`` turns, a lease (fence 1), a succeeded entry put and a pending entry claimed under it."""


def ledger_columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("PRAGMA table_info(unbroken_effects)").fetchall()
    conn.close()
    return [row[1] for row in rows]


def test_a_schema_6_file_gets_the_ledger_fence_column_and_keeps_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA6_DUMP.read_text())
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    assert meta_schema(path) == "6" and "lease_fence" not in ledger_columns(path)
    store = SQLiteStore(path)
    try:
        assert meta_schema(path) == "8" and ledger_columns(path)[-1] == "lease_fence"
        old = store.ledger_list("v6-run")  # checksums checked: an entry without a fence hashes as before
        assert [(e.key, e.status, e.fence) for e in old] == [
            ("ub_done_key", "succeeded", None),
            ("ub_pending_key", "pending", None),
        ]
        assert store.load("v6-run").save_seq == 3
        lease = store.acquire_lease("v6-run", "worker-2", 60.0, takeover_from="worker-1")
        assert lease.fence > 1 and lease.previous_fence == 1
        retried = dataclasses.replace(old[1], attempts=2, fence=lease.fence)
        store.ledger_put(retried, fence=lease.fence)
        assert store.ledger_get("v6-run", "ub_pending_key") == retried
        writer = continue_run(store, "v6-run")
        writer.turn(4, fence=lease.fence)
        assert store.load("v6-run") == writer.state
    finally:
        store.close()
