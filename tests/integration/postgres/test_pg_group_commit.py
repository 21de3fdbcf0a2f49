"""Group commit on the real server: threads of one process saving at once share commits, each
save still gets its own answer (written, fenced out, conflicting, failed) in a shared batch,
and a SIGKILL in the middle of a batch loses nothing that was acknowledged.

A record row's ``xmin`` is the transaction that wrote it: records with one ``xmin`` were
committed together. That counts the commits of these runs alone, whatever else the server runs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pgtest import connect, with_options

from unbroken import crashpoints
from unbroken.codec import EncodedSave, encode_full
from unbroken.errors import ConcurrentSave, LeaseLost, StoreUnavailable
from unbroken.state import LedgerEntry, RunState
from unbroken.stores._pg_group_commit import Pending
from unbroken.stores.postgres import PostgresStore

CHILD = Path(__file__).with_name("group_commit_child.py")


def save(seq: int, run_id: str, ledger: tuple[LedgerEntry, ...] = ()) -> EncodedSave:
    state = RunState(run_id=run_id, task="t", save_seq=seq, turns=seq)
    encoded = encode_full(state, "step")
    return dataclasses.replace(encoded, ledger=ledger) if ledger else encoded


def transactions(schema: str, *, min_seq: int = 2) -> tuple[int, int]:
    """(records, distinct writing transactions) of the schema's records from ``min_seq`` on."""
    with connect(schema) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT xmin::text) FROM unbroken_records WHERE seq >= %s", (min_seq,)
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def xmins(schema: str, run_ids: list[str], seq: int) -> set[str]:
    with connect(schema) as conn:
        rows = conn.execute(
            "SELECT xmin::text FROM unbroken_records WHERE run_id = ANY(%s) AND seq = %s", (run_ids, seq)
        ).fetchall()
    assert len(rows) == len(run_ids)
    return {row[0] for row in rows}


@pytest.fixture
def store(pg_schema: tuple[str, str]) -> Iterator[PostgresStore]:
    # Two connections: a batch forms when more saves come at once than connections are free.
    opened = PostgresStore(with_options(pg_schema[1], pool_size="2"))
    yield opened
    opened.close()


def test_threads_saving_at_once_share_commits_and_every_run_loads_whole(
    store: PostgresStore, pg_schema: tuple[str, str]
) -> None:
    threads, saves = 8, 30
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            start.wait()
            for seq in range(1, saves + 1):
                store.append(save(seq, f"r{index}"), expect_seq=seq - 1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    for index in range(threads):
        assert [r.seq for r in store.read_records(f"r{index}")] == list(range(1, saves + 1))
        assert store.load(f"r{index}").turns == saves
    records, commits = transactions(pg_schema[0])
    assert records == threads * (saves - 1)
    # Each save alone would be its own commit (records == commits): 8 threads share them.
    assert commits <= records * 3 // 4, f"{records} saves in {commits} commits"


def hold_first_batch(store: PostgresStore, queued: int) -> Callable[[], None]:
    """Make the group's first batch wait until ``queued`` more saves are queued behind it, so
    they all go in the next batch; returns a function that raises if they never queued. The
    store gets one connection: a second batch would not wait behind the first."""
    backend = store.backend
    backend.settings = dataclasses.replace(backend.settings, pool_size=1)
    backend._group = None  # made again, one batch wide
    send = backend._send_batch
    group = backend._group_commit()
    first = threading.Event()
    timed_out: list[str] = []
    sizes: list[int] = []

    def held(batch: list[Pending]) -> None:
        sizes.append(len(batch))
        if not first.is_set():
            first.set()
            deadline = time.monotonic() + 10
            while len(group._queue) < queued and time.monotonic() < deadline:
                time.sleep(0.005)
            if len(group._queue) < queued:
                timed_out.append(f"only {len(group._queue)} of {queued} saves queued")
        send(batch)

    group._send = held

    def check() -> None:
        assert timed_out == []
        assert sizes[:2] == [1, queued], sizes  # the held save alone, then all the others at once

    return check


def test_each_save_of_a_shared_batch_gets_its_own_answer(store: PostgresStore, pg_schema: tuple[str, str]) -> None:
    good = [f"good{i}" for i in range(4)]
    for run_id in [*good, "fenced", "stale", "ledger", "bad", "block"]:
        store.append(save(1, run_id), expect_seq=0)
    store.append(save(2, "stale"), expect_seq=1)  # "stale" is at 2: a save expecting 1 conflicts
    leases = {run_id: store.acquire_lease(run_id, "me", 60) for run_id in [*good, "fenced", "ledger", "bad"]}
    entry = LedgerEntry(key="k1", run_id="ledger", call_id="c1", tool="send", args_hash="h", status="succeeded")
    attempts: dict[str, Callable[[], None]] = {
        run_id: functools.partial(store.append, save(2, run_id), expect_seq=1, fence=leases[run_id].fence)
        for run_id in good
    }
    store.acquire_lease("fenced", "other", 60, takeover_from="me")  # our fence on "fenced" is now stale
    attempts["fenced"] = lambda: store.append(save(2, "fenced"), expect_seq=1, fence=leases["fenced"].fence)
    attempts["stale"] = lambda: store.append(save(2, "stale"), expect_seq=1)
    attempts["ledger"] = lambda: store.append(save(2, "ledger", (entry,)), expect_seq=1, fence=leases["ledger"].fence)
    check = hold_first_batch(store, queued=len(attempts))
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
        **dict.fromkeys(good, "written"),
        "ledger": "written",
        "block": "written",
        "fenced": LeaseLost.__name__,
        "stale": ConcurrentSave.__name__,
    }
    # The written saves were one transaction: the refused ones in their batch cost them nothing.
    assert len(xmins(pg_schema[0], [*good, "ledger"], 2)) == 1
    assert [e.key for e in store.ledger_list("ledger")] == ["k1"]
    for run_id in ("fenced", "stale"):  # nothing of a refused save was written
        assert store.load(run_id).save_seq == {"fenced": 1, "stale": 2}[run_id]
        assert [r.seq for r in store.read_records(run_id)] == list(range(1, store.load(run_id).save_seq + 1))


def test_a_save_that_raises_inside_a_batch_fails_alone_and_the_others_are_written(
    store: PostgresStore, pg_schema: tuple[str, str]
) -> None:
    good = [f"good{i}" for i in range(3)]
    for run_id in [*good, "bad", "block"]:
        store.append(save(1, run_id), expect_seq=0)
    # PostgreSQL text cannot hold NUL: this save's statement raises, rolling its batch back.
    text = save(2, "bad").body_bytes().decode()
    broken = dataclasses.replace(save(2, "bad"), body=text[:-1] + "\x00}")
    attempts: dict[str, Callable[[], None]] = {
        run_id: functools.partial(store.append, save(2, run_id), expect_seq=1) for run_id in good
    }
    attempts["bad"] = lambda: store.append(broken, expect_seq=1)
    check = hold_first_batch(store, queued=len(attempts))
    outcomes: dict[str, str] = {}

    def attempt(run_id: str, call: Callable[[], None]) -> None:
        try:
            call()
            outcomes[run_id] = "written"
        except BaseException as exc:
            outcomes[run_id] = type(exc).__name__

    blocker = threading.Thread(target=attempt, args=("block", lambda: store.append(save(2, "block"), expect_seq=1)))
    blocker.start()
    time.sleep(0.05)
    threads = [threading.Thread(target=attempt, args=item) for item in attempts.items()]
    for thread in threads:
        thread.start()
    for thread in [blocker, *threads]:
        thread.join()
    check()
    assert outcomes == {**dict.fromkeys([*good, "block"], "written"), "bad": StoreUnavailable.__name__}
    assert [r.seq for r in store.read_records("bad")] == [1]
    for run_id in good:
        assert [r.seq for r in store.read_records(run_id)] == [1, 2]


def test_sigkill_in_the_middle_of_a_batch_loses_no_acknowledged_save(pg_schema: tuple[str, str]) -> None:
    schema, url = pg_schema
    threads, saves = 8, 40
    env = {**os.environ, crashpoints.ENV_VAR: "postgres.group_commit:10"}
    env["PYTHONPATH"] = os.pathsep.join([str(CHILD.parent), env.get("PYTHONPATH", "")])
    child = subprocess.run(
        [sys.executable, str(CHILD), with_options(url, pool_size="2"), str(threads), str(saves)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    acknowledged: dict[str, int] = {}
    for line in child.stdout.splitlines():
        run_id, seq = line.split()
        acknowledged[run_id] = max(acknowledged.get(run_id, 0), int(seq))
    with PostgresStore(url) as store:
        for index in range(threads):
            run_id = f"gc-{index}"
            acked = acknowledged.get(run_id, 0)
            seqs = [r.seq for r in store.read_records(run_id)]
            head = seqs[-1] if seqs else 0
            # Every acknowledged save is there; at most the one in flight beyond it (committed,
            # killed before it was acknowledged), never a record past the run's head or a gap.
            assert acked <= head <= acked + 1, (run_id, acked, head)
            assert seqs == list(range(1, head + 1))
            if head:
                assert store.load(run_id).save_seq == head  # the head and the records agree
        records, commits = transactions(schema)
        assert commits < records  # it was batching when killed
