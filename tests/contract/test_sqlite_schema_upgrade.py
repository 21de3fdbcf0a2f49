"""A SQLite store file written by store schema 2 keeps working: opening it upgrades it in place
(one write transaction adds the one-statement save path), and its runs load, save, refuse stale
or fenced-out writes, and report a missing tail exactly as before.

The file comes from ``data/sqlite_store_schema2.sql``: a dump of a store that the schema-2 code
(git c66619e) wrote with ``RunWriter`` turns, a lease and ``ledger_claim``.
"""

from __future__ import annotations

import copy
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
        assert meta_schema(path) == str(STORE_SCHEMA) == "3"
        assert {row.run_id: row.turns for row in store.list_runs()} == {"leased-run": 5, "free-run": 2}
        state = store.load("leased-run")
        assert (state.save_seq, state.turns, len(state.messages)) == (5, 5, 5)
        assert [entry.key for entry in store.ledger_list("leased-run")] == ["ub_old_key"]

        lease = store.acquire_lease("leased-run", "worker-2", 60.0)
        assert lease.fence == 2
        writer = continue_run(store, "leased-run")
        writer.turn(6, fence=lease.fence)  # the one-statement save, on the upgraded file
        saved = copy.deepcopy(writer.state)
        with pytest.raises(LeaseLost):
            writer.turn(7, fence=1)  # the old fence is refused, nothing written
        head = store.read_head("leased-run")
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
