"""Lease renewals: one thread per store renews every lease this process holds through it
(issue 24 goal 1: 200 runs were 200 heartbeat threads)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

from unbroken import LeaseLost, open_store
from unbroken.fencing import LeaseGuard
from unbroken.leases import Heartbeat, take_lease
from unbroken.stores.base import Store

TTL = 0.6  # renewed every 0.2 s
RUNS = 20


def _until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within 15 s"
        time.sleep(0.01)


def _expiry(store: Store, run_id: str) -> float:
    head = store.head_of(run_id)
    assert head is not None
    return head.expires_at


def _leases(store: Store) -> list[LeaseGuard]:
    return [take_lease(store, f"run-{i}", "worker-a", TTL) for i in range(RUNS)]


def test_one_thread_renews_every_lease_of_a_store() -> None:
    store = open_store("memory://")
    guards = _leases(store)
    before = set(threading.enumerate())
    with ExitStack() as stack:
        for guard in guards:
            stack.enter_context(Heartbeat(guard))
        started = set(threading.enumerate()) - before
        assert len(started) == 1, f"{len(started)} threads renew {RUNS} leases of one store"
        first = {guard.run_id: _expiry(store, guard.run_id) for guard in guards}
        _until(lambda: all(_expiry(store, run_id) > at for run_id, at in first.items()))
        assert all(guard.lost is None for guard in guards)
    _until(lambda: not any(thread.is_alive() for thread in started))  # it stops holding no lease


def test_a_fenced_out_holder_is_dropped_and_the_others_are_still_renewed() -> None:
    store = open_store("memory://")
    guards = _leases(store)
    with ExitStack() as stack:
        for guard in guards:
            stack.enter_context(Heartbeat(guard))
        taken = store.acquire_lease("run-0", "worker-b", 60.0, takeover_from="worker-a")
        _until(lambda: guards[0].lost is not None)
        assert isinstance(guards[0].lost, LeaseLost)
        marks = {guard.run_id: _expiry(store, guard.run_id) for guard in guards[1:]}
        _until(lambda: all(_expiry(store, run_id) > at for run_id, at in marks.items()))
        held = store.lease_of("run-0")
        assert held is not None and (held.owner, held.fence) == ("worker-b", taken.fence)  # never renewed back


def test_a_lease_whose_run_ended_is_no_longer_renewed() -> None:
    store = open_store("memory://")
    ended, running = _leases(store)[:2]
    with Heartbeat(running):
        with Heartbeat(ended):
            pass
        at = _expiry(store, ended.run_id)
        mark = _expiry(store, running.run_id)
        _until(lambda: _expiry(store, running.run_id) > mark)  # the store's thread still beats
        mark = _expiry(store, running.run_id)
        _until(lambda: _expiry(store, running.run_id) > mark)
        assert _expiry(store, ended.run_id) == at
