"""Guarantee 6: a full disk (ENOSPC) or an I/O error (EIO) at any write, flush, fsync, rename
or directory fsync is a typed ``StoreUnavailable``; the run stays as it was, no temp file is
left behind, a failed fsync is never reported as a durable save, and the retry works."""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from chaos_agent import SERVICE_ENV, make_agent
from reliability_agents import TASK

from faults_kit import DiskFaults, FailingConnection
from unbroken import LedgerEntry, RunState, Store, StoreUnavailable, open_store
from unbroken.codec import Encoder, encode_full
from unbroken.stores import files as file_store_module

RUN_ID = "faults"
Operation = Callable[[Store, RunState], None]


def _next_save(store: Store, state: RunState) -> None:
    encoder = Encoder()
    encoder.prime(state)
    state.messages.append({"role": "user", "content": "one more"})
    state.save_seq += 1
    entry = LedgerEntry(RUN_ID, "ub_new_key", "toolu_99", "send_email", "h", "succeeded")
    store.append(encoder.encode(state, "tools_done", ledger=[entry]), expect_seq=state.save_seq - 1)


def _claim(store: Store, state: RunState) -> None:
    store.ledger_claim(LedgerEntry(RUN_ID, "ub_claimed", "toolu_98", "charge_card", "h", "pending"))


def _lease(store: Store, state: RunState) -> None:
    store.acquire_lease(RUN_ID, "someone:1:1:x", 30.0)


def _rewrite(store: Store, state: RunState) -> None:
    state.save_seq += 1
    store.rewrite(RUN_ID, [encode_full(state, "recovered")], expect_seq=state.save_seq - 1)


OPERATIONS: dict[str, Operation] = {"append": _next_save, "ledger claim": _claim, "lease": _lease, "rewrite": _rewrite}


def _base(kind: str, directory: Path) -> str:
    url = f"file://{directory / 'store'}" if kind == "file" else f"sqlite:///{directory / 'store.db'}"
    os.environ[SERVICE_ENV] = str(directory)
    try:
        store = open_store(url)
        make_agent(store).run(TASK, run_id=RUN_ID)
        store.close()
    finally:
        del os.environ[SERVICE_ENV]
    return url


def _observe(store: Store) -> tuple[object, ...]:
    ledger = {entry.key: entry for entry in store.ledger_list(RUN_ID)}
    lease = store.lease_of(RUN_ID)
    return store.read_records(RUN_ID), ledger, (lease.owner, lease.fence) if lease else None


def _leftovers(directory: Path) -> list[str]:
    return [
        str(path)
        for path in directory.rglob("*")
        if path.name.endswith(".tmp") or path.name.startswith(".new-") or path.name in ("records.new", "records.old")
    ]


def _fresh(base: Path, into: Path) -> Path:
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(base, into)
    return into


def _check_failure_left_the_run_intact(store: Store, before: tuple[object, ...], name: str) -> None:
    records, ledger, lease = _observe(store)
    assert records == before[0], f"{name}: the run's records changed"
    if lease != before[2]:
        # A lease or ledger file renamed into place whose directory fsync then failed stays
        # visible (the call still raised): the fence may only have moved forward.
        assert lease is not None and (before[2] is None or lease[1] > before[2][1]), f"{name}: lease went back"  # type: ignore[index]
    old_ledger = before[1]
    assert isinstance(old_ledger, dict) and isinstance(ledger, dict)
    for key, entry in ledger.items():
        # Outcomes go to the ledger before the record (see FileStore.append): a new key or the
        # failed save's own outcome may be there, any older entry must be untouched.
        assert key not in old_ledger or entry == old_ledger[key] or entry.key == "ub_new_key", name


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_file_store_disk_errors_at_every_step_are_typed_and_change_nothing(operation: str, scratch: Path) -> None:
    base = scratch / "base"
    base.mkdir()
    url = _base("file", base)

    def url_of(directory: Path) -> str:
        return url.replace(str(base), str(directory))

    counting = _fresh(base, scratch / "count")
    store = open_store(url_of(counting))
    with DiskFaults(file_store_module) as counter:
        OPERATIONS[operation](store, store.load(RUN_ID))
    steps = counter.ops
    assert {"write", "fsync", "rename", "dirsync"} <= set(steps) or operation == "ledger claim"
    for code in (errno.ENOSPC, errno.EIO):
        for fail_at in range(1, len(steps) + 1):
            work = _fresh(base, scratch / "work")
            store = open_store(url_of(work))
            before = _observe(store)
            state = store.load(RUN_ID)
            name = f"{operation}: {errno.errorcode[code]} at step {fail_at} ({steps[fail_at - 1]})"
            with pytest.raises(StoreUnavailable), DiskFaults(file_store_module, fail_at, code):
                OPERATIONS[operation](store, state)
            assert _leftovers(work) == [], name
            _check_failure_left_the_run_intact(open_store(url_of(work)), before, name)
            OPERATIONS[operation](store, store.load(RUN_ID))  # the retry writes afresh and succeeds
            store.close()


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_sqlite_full_disk_and_io_errors_at_every_statement_are_typed_and_change_nothing(
    operation: str, scratch: Path
) -> None:
    base = scratch / "base"
    base.mkdir()
    url = _base("sqlite", base)
    probe = open_store(url.replace(str(base), str(_fresh(base, scratch / "count"))))
    loaded = probe.load(RUN_ID)
    counter = FailingConnection(probe.backend.conn, None, "")  # type: ignore[attr-defined]
    probe.backend._conn = counter  # type: ignore[attr-defined]
    OPERATIONS[operation](probe, loaded)
    steps = len(counter.calls)
    probe.close()
    for message in ("database or disk is full", "disk I/O error"):
        for fail_at in range(1, steps + 1):
            work = _fresh(base, scratch / "work")
            store = open_store(url.replace(str(base), str(work)))
            before = _observe(store)
            state = store.load(RUN_ID)
            store.backend._conn = FailingConnection(store.backend.conn, fail_at, message)  # type: ignore[attr-defined]
            with pytest.raises(StoreUnavailable):
                OPERATIONS[operation](store, state)
            store.backend._conn = store.backend._conn._conn  # type: ignore[attr-defined]
            _check_failure_left_the_run_intact(store, before, f"{operation}: {message} at statement {fail_at}")
            OPERATIONS[operation](store, store.load(RUN_ID))
            store.close()


def test_a_failed_fsync_is_never_retried_and_trusted(scratch: Path) -> None:
    """fsyncgate: after fsync fails the dirty pages may be gone; a second fsync can succeed
    without writing them. The save must fail, and must not call fsync on that file again."""
    base = scratch / "base"
    base.mkdir()
    url = _base("file", base)
    store = open_store(url)
    state = store.load(RUN_ID)
    with DiskFaults(file_store_module) as counter:
        _next_save(store, replace(state, messages=list(state.messages)))
    first_fsync = counter.ops.index("fsync") + 1
    store.close()
    work = _fresh(base, scratch / "work")
    store = open_store(url.replace(str(base), str(work)))
    state = store.load(RUN_ID)
    started = time.perf_counter()
    with pytest.raises(StoreUnavailable), DiskFaults(file_store_module, first_fsync, errno.EIO) as faults:
        _next_save(store, state)
    assert faults.failed == "fsync"
    assert faults.ops[first_fsync:].count("fsync") == 0  # no second fsync of anything after the failure
    assert time.perf_counter() - started < 5
    assert store.load(RUN_ID).save_seq == state.save_seq - 1
