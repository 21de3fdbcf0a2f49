"""The PostgreSQL store against the real server: conditional appends, fencing, leases on the
database clock, the ledger's insert-if-absent, URLs and error messages, and migrations."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgtest import connect, fresh_schema, require_server, server_url, with_options

from unbroken import Agent, ScriptedModel, tool
from unbroken.codec import EncodedSave, encode_full
from unbroken.errors import ConcurrentSave, InvalidStoreURL, LeaseHeld, LeaseLost, StoreUnavailable
from unbroken.state import LedgerEntry, RunState
from unbroken.stores import open_store
from unbroken.stores.postgres import _CHUNKED_ROWS, _ORDERED_READ, PostgresStore, Q, migrate, migrations

FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


def save(seq: int, run_id: str = "r1") -> EncodedSave:
    """A whole-state save record at ``seq`` (what a writer would append)."""
    return encode_full(RunState(run_id=run_id, task="t", save_seq=seq, turns=seq), "step")


def test_open_store_routes_postgresql_urls_to_the_postgres_store(pg_url: str) -> None:
    with open_store(pg_url) as store:
        assert isinstance(store, PostgresStore)
        assert {"leases", "ledger", "multi_host", "claim"} <= store.capabilities


def test_a_run_saved_through_an_agent_loads_back_identically(pg_store: PostgresStore) -> None:
    @tool(effect="side_effect")
    def send(to: str) -> str:
        return f"sent to {to}"

    script: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": "c1", "name": "send", "input": {"to": "bob"}}], "usage": {}},
        FINAL,
    ]
    result = Agent(ScriptedModel(script), [send], pg_store).run("say hi", run_id="r1")
    loaded = pg_store.load("r1")
    assert result.status == "completed"
    assert loaded.messages == result.state.messages if result.state else False
    assert [info.label for info in pg_store.history("r1")] == ["start", "model_turn", "tools_done", "completed"]
    assert [entry.status for entry in pg_store.ledger_list("r1")] == ["succeeded"]


def test_append_at_a_stale_head_is_refused_with_concurrent_save_and_writes_nothing(pg_store: PostgresStore) -> None:
    pg_store.append(save(1), expect_seq=0)
    pg_store.append(save(2), expect_seq=1)
    with pytest.raises(ConcurrentSave):
        pg_store.append(save(2), expect_seq=1)
    assert [record.seq for record in pg_store.read_records("r1")] == [1, 2]


def test_a_stale_owners_write_is_refused_with_lease_lost_and_changes_nothing(pg_store: PostgresStore) -> None:
    old = pg_store.acquire_lease("r1", "old-owner", 0.2)
    pg_store.append(save(1), expect_seq=0, fence=old.fence)
    time.sleep(0.3)  # the old lease expires on the database clock
    new = pg_store.acquire_lease("r1", "new-owner", 30)
    before = pg_store.read_records("r1")
    entry = LedgerEntry("r1", "k1", "c1", "send", "h", "pending")
    with pytest.raises(LeaseLost):
        pg_store.append(save(2), expect_seq=1, fence=old.fence)
    with pytest.raises(LeaseLost):
        pg_store.ledger_claim(entry, fence=old.fence)
    with pytest.raises(LeaseLost):
        pg_store.ledger_put(entry, fence=old.fence)
    with pytest.raises(LeaseLost):
        pg_store.renew_lease(old, 30)
    pg_store.release_lease(old)  # a no-op for a lost lease
    assert pg_store.read_records("r1") == before
    assert pg_store.ledger_list("r1") == []
    held = pg_store.lease_of("r1")
    assert held is not None and (held.owner, held.fence) == ("new-owner", new.fence)


def test_every_acquisition_bumps_the_fence_token(pg_store: PostgresStore) -> None:
    leases = [pg_store.acquire_lease("r1", "me", 30) for _ in range(3)]
    fences = [lease.fence for lease in leases]
    assert fences == sorted(set(fences))  # each above the last (not consecutive: the store clock is their floor)
    assert [lease.previous_fence for lease in leases] == [0, *fences[:2]]


def test_a_live_lease_of_another_owner_is_not_taken_until_it_expires(pg_store: PostgresStore) -> None:
    pg_store.acquire_lease("r1", "a", 0.3)
    with pytest.raises(LeaseHeld, match="held by a"):
        pg_store.acquire_lease("r1", "b", 30)
    time.sleep(0.4)
    assert pg_store.acquire_lease("r1", "b", 30).owner == "b"


def test_lease_expiry_follows_the_database_clock_whatever_the_client_clock_says(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect() as conn:
        (db_now,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()  # type: ignore[misc]
    real_time = time.time
    for skew in (600.0, -600.0):
        monkeypatch.setattr(time, "time", lambda skew=skew: real_time() + skew)
        lease = pg_store.acquire_lease("r1", f"owner{skew}", 10)
        monkeypatch.setattr(time, "time", real_time)
        assert db_now + 9 < lease.expires_at < db_now + 15, (skew, lease.expires_at - db_now)
        pg_store.release_lease(lease)
    pg_store.acquire_lease("r1", "holder", 10)
    monkeypatch.setattr(time, "time", lambda: real_time() + 600)  # this client thinks the lease is long gone
    with pytest.raises(LeaseHeld):
        pg_store.acquire_lease("r1", "thief", 10)


def test_ledger_claim_inserts_only_if_the_key_is_absent(pg_store: PostgresStore) -> None:
    first = LedgerEntry("r1", "k1", "c1", "send", "h1", "pending", created_at=1.5, updated_at=1.5)
    second = LedgerEntry("r1", "k1", "c1", "send", "h2", "pending")
    assert pg_store.ledger_claim(first) == (first, True)
    assert pg_store.ledger_claim(second) == (first, False)


def test_of_many_threads_claiming_one_ledger_key_exactly_one_wins(pg_store: PostgresStore) -> None:
    wins: list[bool] = []
    barrier = threading.Barrier(8)

    def claim(i: int) -> None:
        barrier.wait()
        wins.append(pg_store.ledger_claim(LedgerEntry("r1", "k", f"c{i}", "t", "h", "pending"))[1])

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(wins) == [False] * 7 + [True]


def test_an_unreachable_server_gives_one_clear_line_naming_host_and_database() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    message = str(caught.value)
    assert "\n" not in message
    assert "127.0.0.1:1" in message and "'nowhere'" in message and "check that the server is running" in message


def test_a_schema_name_that_is_not_a_plain_identifier_is_refused() -> None:
    with pytest.raises(InvalidStoreURL, match="schema"):
        PostgresStore(with_options(server_url(), schema='x"; DROP TABLE y; --'))


def test_the_url_password_never_appears_in_messages() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore("postgresql://someone:s3cret@127.0.0.1:1/db?connect_timeout=2")
    assert "s3cret" not in str(caught.value)


def test_each_schema_is_a_separate_store(pg_store: PostgresStore) -> None:
    pg_store.acquire_lease("r1", "me", 30)
    with fresh_schema() as (_, other_url), PostgresStore(other_url) as other:
        assert other.lease_of("r1") is None


# --------------------------------------------------------------------------- migrations


def _shape(schema: str) -> dict[str, list[tuple[object, ...]]]:
    with connect() as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default, generation_expression "
            "FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY table_name, column_name",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, replace(indexdef, %s, 'S') FROM pg_indexes WHERE schemaname = %s "
            "ORDER BY indexname",
            (f"{schema}.", schema),
        ).fetchall()
        constraints = conn.execute(
            "SELECT table_name, constraint_name, constraint_type FROM information_schema.table_constraints "
            "WHERE table_schema = %s AND constraint_type <> 'CHECK' ORDER BY constraint_name",
            (schema,),
        ).fetchall()
        options = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY c.relname",
            (schema,),
        ).fetchall()
    return {"columns": columns, "indexes": indexes, "constraints": constraints, "options": options}


def test_a_fresh_schema_equals_the_one_reached_by_applying_every_migration() -> None:
    require_server()
    with fresh_schema() as (fresh, _), fresh_schema() as (stepped, _):
        with connect(fresh) as conn:
            assert migrate(conn, fresh, fresh_from_schema_file=True) == [m.version for m in migrations()]
        with connect(stepped) as conn:
            assert migrate(conn, stepped, fresh_from_schema_file=False) == [m.version for m in migrations()]
        fresh_shape, stepped_shape = _shape(fresh), _shape(stepped)
        assert fresh_shape["columns"] and fresh_shape["indexes"]
        assert fresh_shape == stepped_shape


def test_migrations_are_recorded_and_applied_once_even_when_many_processes_open_the_store(
    pg_schema: tuple[str, str],
) -> None:
    schema, url = pg_schema
    errors: list[BaseException] = []

    def open_and_close() -> None:
        try:
            PostgresStore(url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_and_close) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with connect() as conn:
        rows = conn.execute(f'SELECT version, name FROM "{schema}".unbroken_migrations ORDER BY version').fetchall()
    assert rows == [(m.version, m.name) for m in migrations()]


def test_every_table_of_a_run_is_keyed_first_by_run_id() -> None:
    """Issue 24 (sharding by run): each table holding a run's data has a primary key whose first
    column is ``run_id`` (the distribution column); ``unbroken_migrations`` is the store's own
    bookkeeping. Read from the catalog of a schema built by the migrations."""
    require_server()
    with fresh_schema() as (schema, _), connect(schema) as conn:
        migrate(conn, schema, fresh_from_schema_file=False)
        keys = conn.execute(
            "SELECT c.relname, array_agg(a.attname::text ORDER BY k.ord) FROM pg_constraint p "
            "JOIN pg_class c ON c.oid = p.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "CROSS JOIN unnest(p.conkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
            "WHERE n.nspname = %s AND p.contype = 'p' GROUP BY c.relname",
            (schema,),
        ).fetchall()
        tables = {row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        )}  # fmt: skip
    by_table = dict(keys)
    assert set(by_table) == tables  # every table has a primary key
    assert by_table.pop("unbroken_migrations") == ["version"]
    assert by_table == {
        "unbroken_runs": ["run_id"],
        "unbroken_records": ["run_id", "seq"],
        "unbroken_effects": ["run_id", "key"],
    }


def test_migration_6_keys_the_ledger_by_run_and_keeps_the_entries_written_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import unbroken.stores.postgres as postgres_module
    from unbroken.codec import dumps
    from unbroken.stores._rows import ledger_to_row
    from unbroken.stores.backend import entry_checksum

    every = migrations()
    with fresh_schema() as (schema, url):
        with monkeypatch.context() as patched, connect(schema) as conn:
            patched.setattr(postgres_module, "migrations", lambda: every[:5])  # a store of the code before 0006
            migrate(conn, schema, fresh_from_schema_file=False)
            old = LedgerEntry("victim", "k-1", "call_0", "pay", "h", "pending", 1, None, 1000.0, 1000.0)
            conn.execute(
                "INSERT INTO unbroken_effects (key, run_id, call_id, tool, args_hash, status, attempts, result, "
                "created_at, updated_at, checksum) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (*ledger_to_row(old, dumps)[:10], entry_checksum(old)),  # no lease_fence before 0007
            )
        with PostgresStore(url) as store:  # applies 0006
            assert store.ledger_list("victim") == [old]
            reused = LedgerEntry("stranger", "k-1", "call_0", "pay", "h2", "pending", 1, None, 2000.0, 2000.0)
            assert store.ledger_claim(reused) == (reused, True)
            assert store.ledger_get("victim", "k-1") == old
        with connect() as conn:
            rows = conn.execute(f'SELECT version FROM "{schema}".unbroken_migrations ORDER BY version').fetchall()
        assert [row[0] for row in rows] == [m.version for m in every]


def test_migration_7_adds_the_ledger_fence_and_keeps_the_entries_written_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import unbroken.stores.postgres as postgres_module
    from unbroken.codec import dumps
    from unbroken.stores._rows import ledger_to_row
    from unbroken.stores.backend import entry_checksum

    every = migrations()
    with fresh_schema() as (schema, url):
        with monkeypatch.context() as patched, connect(schema) as conn:
            patched.setattr(postgres_module, "migrations", lambda: every[:6])  # a store of the code before 0007
            migrate(conn, schema, fresh_from_schema_file=False)
            old = LedgerEntry("run", "k-1", "call_0", "pay", "h", "pending", 1, None, 1000.0, 1000.0)
            conn.execute(
                "INSERT INTO unbroken_effects (key, run_id, call_id, tool, args_hash, status, attempts, result, "
                "created_at, updated_at, checksum) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (*ledger_to_row(old, dumps)[:10], entry_checksum(old)),
            )
        with PostgresStore(url) as store:  # applies 0007
            assert store.ledger_list("run") == [old] and old.fence is None  # its checksum still holds
            lease = store.acquire_lease("run", "worker-1", 60.0)
            retried = dataclasses.replace(old, attempts=2, fence=lease.fence)
            store.ledger_put(retried, fence=lease.fence)
            assert store.ledger_get("run", "k-1") == retried


def test_migration_files_are_numbered_without_gaps() -> None:
    versions = [m.version for m in migrations()]
    assert versions == list(range(1, len(versions) + 1))
    folder = Path(__file__).parents[3] / "src/unbroken/stores/sql/postgres/migrations"
    assert len(list(folder.glob("*.sql"))) == len(versions)


def test_the_resume_read_is_one_ordered_stream_and_a_read_left_early_leaves_the_store_usable(
    pg_store: PostgresStore,
) -> None:
    saves = [save(seq) for seq in range(1, 2502)]  # more than two chunks of the stream
    pg_store.rewrite("r1", saves, expect_seq=0)
    streamed = pg_store.iter_raw_records("r1")
    assert next(iter(streamed)).seq == 1
    assert isinstance(streamed, Generator)
    streamed.close()  # psycopg cancels the rest; the connection goes back clean
    pg_store.append(save(2502), expect_seq=2501)

    records = list(pg_store.iter_raw_records("r1"))
    assert [r.seq for r in records] == list(range(1, 2503))
    assert [(r.seq, r.body, r.checksum) for r in records] == [
        (r.seq, r.body.encode() if isinstance(r.body, str) else r.body, r.checksum) for r in pg_store.read_records("r1")
    ]
    assert pg_store.load("r1").save_seq == 2502
    assert list(pg_store.iter_raw_records("no-such-run")) == []


@pytest.mark.skipif(not _CHUNKED_ROWS, reason="libpq before 17 streams row by row")
def test_the_resume_stream_comes_in_chunks_of_at_most_100_rows(pg_store: PostgresStore, monkeypatch: Any) -> None:
    """Chunks of ~140 KB, not 1.4 MB: the client's CPU for streaming 10,000 turns fell from ~22
    to ~15 ms (docs/benchmarks.md). Each chunk the stream hands over is counted here."""
    pg_store.rewrite("r1", [save(seq) for seq in range(1, 251)], expect_seq=0)
    chunks: list[int] = []
    real_fetch = psycopg.Cursor._stream_fetchone_gen

    def counted(cursor: Any, first: bool) -> Any:
        result = yield from real_fetch(cursor, first)
        if result is not None:
            chunks.append(result.ntuples)
        return result

    monkeypatch.setattr(psycopg.Cursor, "_stream_fetchone_gen", counted)
    assert [r.seq for r in pg_store.iter_raw_records("r1")] == list(range(1, 251))
    assert sum(chunks) == 250
    assert max(chunks) <= 100


def test_reading_a_run_in_seq_order_walks_the_primary_key_and_sorts_nothing(pg_store: PostgresStore) -> None:
    pg_store.rewrite("r1", [save(seq) for seq in range(1, 301)], expect_seq=0)
    with connect(pg_store.backend.schema) as conn, conn.transaction():
        conn.execute("ANALYZE unbroken_records")  # with fresh statistics the planner's own choice is a sort
        conn.execute(_ORDERED_READ)
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + Q["read_records_raw"], {"run_id": "r1"}))
    assert "Index Scan using unbroken_records_pkey" in plan
    assert "Sort" not in plan


def test_a_lease_acquisition_reads_the_server_clock_once(pg_store: PostgresStore, monkeypatch: Any) -> None:
    """The fence's floor (``next_fence``) comes from the reading the lease's expiry is computed
    from (``lease_clock_is_store_time``: both are the server's clock), not a round trip more."""
    backend = pg_store.backend
    readings: list[float] = []
    real = backend.store_time

    def counted() -> float:
        readings.append(real())
        return readings[-1]

    monkeypatch.setattr(backend, "store_time", counted)
    lease = pg_store.acquire_lease("r-clock", "w1", 30)

    assert len(readings) == 1
    assert lease.fence >= int(readings[0] * 1_000_000)  # the floor from that one reading
    assert lease.expires_at == pytest.approx(readings[0] + 30)
