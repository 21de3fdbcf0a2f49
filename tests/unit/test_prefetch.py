"""The read-ahead thread of a long load (``stores.prefetch``), here on SQLite (forced on: its
default is off): the same records, order and errors as a plain read, and no thread left behind
on any path."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unbroken import CorruptCheckpoint, StoreUnavailable, open_store
from unbroken.codec import Encoder, StoredRecord
from unbroken.state import RunState
from unbroken.stores import prefetch as prefetch_module
from unbroken.stores.prefetch import Prefetch
from unbroken.stores.sqlite import SQLiteStore


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("unbroken-prefetch", "unbroken-read-"))]


@pytest.fixture(autouse=True)
def no_thread_outlives_a_test() -> Iterator[None]:
    yield
    assert prefetch_threads() == []


# --------------------------------------------------------------------------- Prefetch itself


@pytest.mark.parametrize("count", [0, 1, 2, 6, 7, 8, 100])
def test_every_item_arrives_once_in_order(count: int) -> None:
    reader = Prefetch(range(count), batch=7, depth=2)
    assert list(reader) == list(range(count))
    assert not reader._thread.is_alive()
    assert list(reader) == []  # exhausted stays exhausted


class Boom(Exception):
    pass


def failing_after(n: int, error: BaseException) -> Iterator[int]:
    yield from range(n)
    raise error


@pytest.mark.parametrize("n", [0, 3, 7, 20])
def test_an_error_in_the_thread_is_raised_in_the_reader_after_the_items_before_it(n: int) -> None:
    error = Boom("the disk went away")
    got: list[int] = []
    reader = Prefetch(failing_after(n, error), batch=7, depth=2)
    with pytest.raises(Boom) as raised:
        for item in reader:
            got.append(item)
    assert raised.value is error and got == list(range(n))
    assert not reader._thread.is_alive()


def test_a_base_exception_in_the_thread_is_raised_too() -> None:
    class Stop(BaseException):
        pass

    with pytest.raises(Stop):
        list(Prefetch(failing_after(3, Stop()), batch=2))


def test_an_error_starting_the_source_is_raised_in_the_reader() -> None:
    class Unreadable:
        def __iter__(self) -> Iterator[int]:
            raise StoreUnavailable("cannot reach the store")

    with pytest.raises(StoreUnavailable, match="cannot reach the store"):
        next(Prefetch(Unreadable()))


class Source:
    """A generator-backed source that records which thread ran it, and holds a lock the way a
    store's read holds its connection (acquired and released by the thread that iterates it)."""

    def __init__(self, count: int | None) -> None:
        self.count = count
        self.lock = threading.Lock()
        self.made = 0
        self.ran_in: set[int] = set()
        self.closed_in: int | None = None

    def __iter__(self) -> Iterator[int]:
        with self.lock:
            try:
                n = 0
                while self.count is None or n < self.count:
                    self.ran_in.add(threading.get_ident())
                    self.made += 1
                    yield n
                    n += 1
            finally:
                self.closed_in = threading.get_ident()


def test_closing_early_stops_the_thread_and_closes_the_source_in_its_own_thread() -> None:
    source = Source(None)  # endless: the thread fills the queue and blocks
    reader = Prefetch(source, batch=4, depth=2)
    assert [next(reader) for _ in range(5)] == [0, 1, 2, 3, 4]
    time.sleep(0.05)
    reader.close()
    assert not reader._thread.is_alive()
    assert source.closed_in is not None and source.closed_in != threading.get_ident()
    assert source.ran_in == {source.closed_in}
    assert not source.lock.locked()
    assert source.made <= 5 + 4 * (2 + 2)  # read ahead by at most the queue and one batch
    with pytest.raises(StopIteration):
        next(reader)
    reader.close()  # twice is fine


def test_a_reader_closed_before_it_starts_reads_nothing_and_stops_the_thread() -> None:
    source = Source(None)
    reader = Prefetch(source, batch=4, depth=1)
    reader.close()
    assert list(reader) == [] and not reader._thread.is_alive() and not source.lock.locked()


def test_closing_the_iterator_a_loader_got_closes_the_reader() -> None:
    source = Source(None)
    reader = Prefetch(source, batch=4, depth=1)
    iterator = iter(reader)
    assert next(iterator) == 0
    iterator.close()  # type: ignore[attr-defined]  # what codec.decode does when it stops early
    assert not reader._thread.is_alive() and not source.lock.locked()


def test_leaving_a_with_block_on_an_error_stops_the_thread() -> None:
    source = Source(10_000)
    with pytest.raises(Boom), Prefetch(source, batch=16) as reader:
        next(reader)
        raise Boom
    assert not reader._thread.is_alive() and not source.lock.locked()


def test_a_source_exhausted_normally_is_closed_in_its_thread() -> None:
    source = Source(50)
    assert list(Prefetch(source, batch=8)) == list(range(50))
    assert source.closed_in is not None and source.closed_in != threading.get_ident()


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Prefetch([1], batch=0)


# --------------------------------------------------------------------------- SQLite and Store.decode


def write_run(store: SQLiteStore, run_id: str, saves: int) -> None:
    """``saves`` save points of a small run: a message each, snapshots every 5."""
    encoder = Encoder(5)
    state = RunState(run_id=run_id, task="t", messages=[{"role": "user", "content": "start"}])
    for seq in range(1, saves + 1):
        state.save_seq = seq
        state.turns = seq
        state.messages.append({"role": "assistant", "content": f"reply {seq} " + "é" * (seq % 7)})
        encoded = encoder.encode(state, "model_turn")
        store.append(encoded, expect_seq=seq - 1)
        encoder.committed(state, encoded)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}?durability=normal")
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


def plain_rows(store: SQLiteStore, run_id: str) -> list[tuple[Any, ...]]:
    sql = "SELECT seq, CAST(body AS BLOB), checksum FROM unbroken_records WHERE run_id=? ORDER BY seq"
    return [tuple(row) for row in store.conn.execute(sql, (run_id,)).fetchall()]


def records(store: SQLiteStore, run_id: str) -> list[tuple[Any, ...]]:
    return [(r.seq, r.body, r.checksum) for r in store.iter_raw_records(run_id)]


def test_the_streamed_read_gives_exactly_the_rows_in_seq_order(store: SQLiteStore) -> None:
    write_run(store, "r", 700)  # several fetches of 256 rows
    assert records(store, "r") == plain_rows(store, "r")
    assert records(store, "none") == []


def test_the_streamed_read_gives_odd_rows_as_stored(store: SQLiteStore) -> None:
    write_run(store, "r", 600)
    conn = store.conn
    conn.execute("DELETE FROM unbroken_records WHERE run_id='r' AND seq IN (3, 256, 257, 300)")  # gaps
    conn.execute("DELETE FROM unbroken_records WHERE run_id='r' AND seq BETWEEN 250 AND 530")  # a long gap
    conn.execute("UPDATE unbroken_records SET body=CAST(body AS BLOB) WHERE run_id='r' AND seq=10")
    conn.execute("UPDATE unbroken_records SET body=? WHERE run_id='r' AND seq=11", ("a\x00b,c",))
    conn.execute("UPDATE unbroken_records SET checksum='1,2' WHERE run_id='r' AND seq=12")
    conn.execute("UPDATE unbroken_records SET checksum=X'00ff' WHERE run_id='r' AND seq=400")  # a blob: row by row
    conn.execute("UPDATE unbroken_records SET body='' WHERE run_id='r' AND seq=13")
    assert records(store, "r") == plain_rows(store, "r")


def test_a_seq_that_is_not_an_integer_is_read_row_by_row_as_stored(store: SQLiteStore) -> None:
    write_run(store, "r", 30)
    store.conn.execute("UPDATE unbroken_records SET seq='7x' WHERE run_id='r' AND seq=7")
    assert records(store, "r") == plain_rows(store, "r")


def prefetched(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[Prefetch[Any]]:
    """Prefetch every load of a run of 8+ saves, and keep each reader for inspection."""
    made: list[Prefetch[Any]] = []
    real = prefetch_module.Prefetch

    class Spy(real):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(prefetch_module, "Prefetch", Spy)
    monkeypatch.setattr(store, "prefetch_from", 8)
    return made


def without_prefetch(store: SQLiteStore, call: Any) -> Any:
    before, store.prefetch_from = store.prefetch_from, None
    try:
        return call()
    finally:
        store.prefetch_from = before


def test_a_long_run_is_read_ahead_and_loads_the_same_state(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(store, "r", 900)
    write_run(store, "short", 5)
    made = prefetched(store, monkeypatch)
    expected = without_prefetch(store, lambda: store.decode("r"))
    got = store.decode("r")
    assert len(made) == 1 and not made[0]._thread.is_alive()
    assert got.state == expected.state and got.records == expected.records and got.last_seq == 900
    store.decode("short")
    assert len(made) == 1  # a short run stays on the simple path


def damage(store: SQLiteStore, sql: str) -> None:
    store.conn.execute(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE unbroken_records SET body=replace(body, 'reply', 'REPLY') WHERE run_id='r' AND seq=400",
        "DELETE FROM unbroken_records WHERE run_id='r' AND seq=400",
        "DELETE FROM unbroken_records WHERE run_id='r' AND seq>=850",
        "UPDATE unbroken_records SET checksum='00000000' WHERE run_id='r' AND seq=1",
    ],
    ids=["flipped-in-the-middle", "missing-in-the-middle", "missing-tail", "first-damaged"],
)
def test_damage_is_found_with_the_same_message_and_recover_gives_the_same_state(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    write_run(store, "r", 900)
    damage(store, sql)
    made = prefetched(store, monkeypatch)
    with pytest.raises(CorruptCheckpoint) as plain:
        without_prefetch(store, lambda: store.decode("r"))
    with pytest.raises(CorruptCheckpoint) as ahead:
        store.decode("r")
    assert str(ahead.value) == str(plain.value) and ahead.value.last_good_seq == plain.value.last_good_seq
    if "seq=1" not in sql:
        expected = without_prefetch(store, lambda: store.decode("r", recover=True))
        got = store.decode("r", recover=True)
        assert (got.state, got.last_seq, got.corrupt_seq, got.problem) == (
            expected.state,
            expected.last_seq,
            expected.corrupt_seq,
            expected.problem,
        )
    assert made and all(not reader._thread.is_alive() for reader in made)
    assert store.read_head("r") is not None  # the store's lock was given back


def test_an_error_while_reading_ahead_is_raised_as_it_is_and_the_store_stays_usable(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(store, "r", 900)
    made = prefetched(store, monkeypatch)
    real = SQLiteStore.iter_raw_records

    def breaking(self: SQLiteStore, run_id: str) -> Iterator[StoredRecord]:
        for record in real(self, run_id):
            if record.seq == 600:
                raise sqlite3.OperationalError("disk I/O error")
            yield record

    monkeypatch.setattr(SQLiteStore, "iter_raw_records", breaking)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        store.decode("r")
    assert made and not made[0]._thread.is_alive()
    monkeypatch.setattr(SQLiteStore, "iter_raw_records", real)
    assert store.decode("r").last_seq == 900  # lock and transaction were released


def test_a_store_error_inside_the_read_keeps_its_type(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(store, "r", 900)
    made = prefetched(store, monkeypatch)
    store.conn.execute("ALTER TABLE unbroken_records RENAME TO elsewhere")
    with pytest.raises(StoreUnavailable, match="no such table"):
        store.decode("r")
    assert made and not made[0]._thread.is_alive()
