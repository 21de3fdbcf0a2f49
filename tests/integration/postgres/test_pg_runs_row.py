"""The run's row on PostgreSQL: an ordinary save updates it in place (a HOT update, no index
entry added), the listing keeps its order, and migration 0008 brings a store made by the schema
before it there with its runs and listing intact."""

from __future__ import annotations

import random
import string
import time
from typing import Any

import psycopg
import pytest
from pgtest import connect, fresh_schema

from unbroken.codec import EncodedSave, encode_full
from unbroken.state import Phase, RunState
from unbroken.stores.postgres import PostgresStore, migrate, migrations

SAVES = 20
OLD_FIRST_PAGE = "SELECT run_id FROM unbroken_runs WHERE head_seq > 0 ORDER BY updated_at DESC, run_id DESC LIMIT 10"
SECOND = 1_800_000_000.0  # every save below is stamped within this one second


def save(seq: int, run_id: str = "r1", *, updated_at: float, phase: Phase | None = None) -> EncodedSave:
    """Save ``seq`` as a turn makes it: the phase alternates between awaiting the model and
    running tools (both claimable) unless ``phase`` is given."""
    phase = phase or ("running_tools" if seq % 2 == 0 else "awaiting_model")
    state = RunState(run_id=run_id, task="t", save_seq=seq, turns=seq, phase=phase, updated_at=updated_at)
    return encode_full(state, "step")


def _updates(schema: str, at_least: int) -> tuple[int, int]:
    """(rows updated, of which in place) of the schema's runs table, from pg_stat_user_tables.
    A backend reports its counts when it ends or idles: wait until ``at_least`` updates show."""
    deadline = time.monotonic() + 15.0
    with connect() as conn:
        while True:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                (schema, "unbroken_runs"),
            ).fetchone()
            assert row is not None
            if row[0] >= at_least or time.monotonic() > deadline:
                return int(row[0]), int(row[1])
            time.sleep(0.05)


def test_an_ordinary_save_updates_the_runs_row_in_place() -> None:
    """The saves of turns (the phase going from awaiting_model to running_tools and back),
    stamped within one second: every one after the first updates the run's row as a heap-only
    tuple (no indexed column changed). With the indexes of the schema before 0008 (the listing's
    keyed on updated_at and filtered on head_seq, the claim's filtered on the phase) none can."""
    with fresh_schema() as (schema, url):
        store = PostgresStore(url)
        try:
            store.append(save(1, updated_at=SECOND), expect_seq=0)  # creates the row, then its first head
            for seq in range(2, SAVES + 2):
                store.append(save(seq, updated_at=SECOND + seq / 1000), expect_seq=seq - 1)
        finally:
            store.close()  # its backends end, and report their counts
        updated, in_place = _updates(schema, at_least=SAVES + 1)
    assert updated == SAVES + 1
    assert in_place >= SAVES  # (the first sets updated_at from NULL: a new listing entry)


def test_a_phase_change_or_a_new_second_moves_the_row_in_the_listing(pg_store: PostgresStore) -> None:
    pg_store.append(save(1, "a", updated_at=SECOND), expect_seq=0)
    pg_store.append(save(1, "b", updated_at=SECOND + 0.5), expect_seq=0)
    assert [row.run_id for row in pg_store.runs_page(None, 10)] == ["b", "a"]
    pg_store.append(save(2, "a", updated_at=SECOND + 0.75), expect_seq=1)  # same second, later
    assert [row.run_id for row in pg_store.runs_page(None, 10)] == ["a", "b"]
    pg_store.append(save(2, "b", updated_at=SECOND + 2.0, phase="completed"), expect_seq=1)
    assert [(row.run_id, row.phase) for row in pg_store.runs_page(None, 10)] == [
        ("b", "completed"),
        ("a", "running_tools"),
    ]
    assert [row.run_id for row in pg_store.runs_page((SECOND + 2.0, "b"), 10)] == ["a"]


def test_migration_8_lists_the_runs_saved_before_it_in_the_same_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import unbroken.stores.postgres as postgres_module

    every = migrations()
    stamps = {"old": SECOND - 5.0, "tie-a": SECOND + 1.25, "tie-b": SECOND + 1.25, "new": SECOND + 1.5}
    with fresh_schema() as (schema, url):
        with monkeypatch.context() as patched:
            patched.setattr(postgres_module, "migrations", lambda: every[:7])  # the code before 0008
            with connect(schema) as conn:
                migrate(conn, schema, fresh_from_schema_file=False)
            before = PostgresStore(url)
            try:
                for run_id, at in stamps.items():
                    before.append(save(1, run_id, updated_at=at), expect_seq=0)
                    before.append(save(2, run_id, updated_at=at), expect_seq=1)
            finally:
                before.close()
            with connect(schema) as conn:  # the listing statement of the code before 0008
                listed_before = [row[0] for row in conn.execute(OLD_FIRST_PAGE)]
        assert listed_before == ["new", "tie-b", "tie-a", "old"]
        with PostgresStore(url) as store:  # applies 0008
            assert [row.run_id for row in store.runs_page(None, 10)] == listed_before
            assert [row.run_id for row in store.runs_page((SECOND + 1.25, "tie-b"), 10)] == ["tie-a", "old"]
            assert store.load("tie-a").save_seq == 2
            store.append(save(3, "old", updated_at=SECOND + 3.0), expect_seq=2)
            assert [row.run_id for row in store.runs_page(None, 1)] == ["old"]
        with connect(schema) as conn:
            versions = [row[0] for row in conn.execute("SELECT version FROM unbroken_migrations ORDER BY version")]
            seconds = dict(conn.execute("SELECT run_id, updated_second FROM unbroken_runs").fetchall())
            options = _options(conn)
        assert versions == [m.version for m in every]
        assert seconds == {"old": SECOND + 3.0, "tie-a": SECOND + 1.0, "tie-b": SECOND + 1.0, "new": SECOND + 1.0}
        assert "fillfactor=80" in options


def _options(conn: psycopg.Connection[Any]) -> list[str]:
    row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'unbroken_runs'::regclass").fetchone()
    return list(row[0] or []) if row is not None else []


def test_a_store_at_the_latest_migration_opens_without_migrating(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every open but the first of a new unbroken: one statement reads the schema's migration and
    the server's durability settings (``open_check``); ``migrate`` and its lock are not needed."""
    import unbroken.stores.postgres as postgres_module

    real = postgres_module.migrate
    applied: list[str] = []

    def counted(conn: Any, schema: str, **options: Any) -> list[int]:
        applied.append(schema)
        return real(conn, schema, **options)

    monkeypatch.setattr(postgres_module, "migrate", counted)
    PostgresStore(pg_url).close()  # the first open creates the schema
    assert len(applied) == 1
    with PostgresStore(pg_url) as store:
        assert store.durability == "power_loss"
        store.append(save(1, updated_at=SECOND), expect_seq=0)
    assert len(applied) == 1


def test_a_long_task_is_not_written_again_at_every_save(pg_store: PostgresStore) -> None:
    """A task over ~2 KB compressed is kept out of line (TOAST): a save that set it again would
    write it, and its WAL, once more each time (the runs table's TOAST relation grows by a copy a
    save). It is written only when it changes."""
    rng = random.Random(7)
    task = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(1400))
    state = RunState(run_id="r1", task=task, save_seq=1, updated_at=SECOND)
    pg_store.append(encode_full(state, "start"), expect_seq=0)
    with connect(pg_store.backend.schema) as conn:
        after_first = _toast_bytes(conn)
        for seq in range(2, 30):
            state = RunState(run_id="r1", task=task, save_seq=seq, turns=seq, updated_at=SECOND + seq / 100)
            pg_store.append(encode_full(state, "step"), expect_seq=seq - 1)
        assert after_first > 0 and _toast_bytes(conn) == after_first
    assert pg_store.load("r1").task == task


def _toast_bytes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'unbroken_runs'::regclass"
    ).fetchone()
    return int(row[0]) if row is not None else 0
