"""A group commit's batch of saves without ledger entries goes as ONE statement (``append_batch``),
with the same answers as the pipeline of one statement per save: each save written, fenced out
or conflicting on its own, the written ones in one transaction."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from pgtest import with_options
from test_pg_group_commit import hold_first_batch, save, xmins

from unbroken.errors import ConcurrentSave, LeaseLost
from unbroken.stores import postgres
from unbroken.stores.postgres import PostgresStore


@pytest.fixture
def store(pg_schema: tuple[str, str]) -> Iterator[PostgresStore]:
    opened = PostgresStore(with_options(pg_schema[1], pool_size="2"))
    yield opened
    opened.close()


def test_a_batch_of_saves_without_ledger_is_one_statement_and_each_gets_its_own_answer(
    store: PostgresStore, pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = [f"good{i}" for i in range(4)]
    for run_id in [*good, "fenced", "stale", "block"]:
        store.append(save(1, run_id), expect_seq=0)
    store.append(save(2, "stale"), expect_seq=1)  # "stale" is at 2: a save expecting 1 conflicts
    leases = {run_id: store.acquire_lease(run_id, "me", 60) for run_id in [*good, "fenced"]}
    attempts: dict[str, Callable[[], None]] = {
        run_id: functools.partial(store.append, save(2, run_id), expect_seq=1, fence=leases[run_id].fence)
        for run_id in good
    }
    store.acquire_lease("fenced", "other", 60, takeover_from="me")  # our fence on "fenced" is now stale
    attempts["fenced"] = lambda: store.append(save(2, "fenced"), expect_seq=1, fence=leases["fenced"].fence)
    attempts["stale"] = lambda: store.append(save(2, "stale"), expect_seq=1)
    check = hold_first_batch(store, queued=len(attempts))
    sent: list[bytes] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def spy_execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query if isinstance(query, bytes) else str(query).encode())
        return execute(self, query, *args, **kwargs)

    def spy_executemany(self: psycopg.Cursor[Any], query: Any, params: Any, **kwargs: Any) -> Any:
        params = list(params)
        sent.extend([query] * len(params))
        return executemany(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", spy_execute)
    monkeypatch.setattr(psycopg.Cursor, "executemany", spy_executemany)
    outcomes: dict[str, str] = {}

    def attempt(run_id: str, call: Callable[[], None]) -> None:
        try:
            call()
            outcomes[run_id] = "written"
        except BaseException as exc:
            outcomes[run_id] = type(exc).__name__

    blocker = threading.Thread(target=attempt, args=("block", lambda: store.append(save(2, "block"), expect_seq=1)))
    blocker.start()
    time.sleep(0.05)  # the blocker leads the first batch (held until the others are queued)
    threads = [threading.Thread(target=attempt, args=item) for item in attempts.items()]
    for thread in threads:
        thread.start()
    for thread in [blocker, *threads]:
        thread.join()
    check()
    assert outcomes == {
        **dict.fromkeys([*good, "block"], "written"),
        "fenced": LeaseLost.__name__,
        "stale": ConcurrentSave.__name__,
    }
    saves_sent = [query for query in sent if query in (postgres._APPEND_RECORD, postgres._APPEND_BATCH)]
    # the held save alone, then the six others in one statement (not six)
    assert saves_sent == [postgres._APPEND_RECORD, postgres._APPEND_BATCH], [q[:40] for q in saves_sent]
    assert len(xmins(pg_schema[0], good, 2)) == 1  # the written ones: one transaction
    for run_id in ("fenced", "stale"):  # nothing of a refused save was written
        assert store.load(run_id).save_seq == {"fenced": 1, "stale": 2}[run_id]
        assert [r.seq for r in store.read_records(run_id)] == list(range(1, store.load(run_id).save_seq + 1))
