"""``LeaseGuard`` tells a run the store lost from a lease another process took (issue 21 item 3)."""

from __future__ import annotations

import pytest

from unbroken import LeaseLost, StoreDataLost, open_store
from unbroken.leases import take_lease


def test_check_after_the_run_vanished_raises_store_data_lost_and_remembers_it() -> None:
    store = open_store("memory://")
    guard = take_lease(store, "r1", "worker-a", 60.0)
    store.delete_run("r1")  # the store lost the run under its live holder

    with pytest.raises(StoreDataLost):
        guard.check()
    with pytest.raises(StoreDataLost):
        guard.renew()  # remembered: the heartbeat stops, every later check says the same

    assert isinstance(guard.lost, StoreDataLost)


def test_check_after_a_takeover_still_raises_lease_lost() -> None:
    store = open_store("memory://")
    guard = take_lease(store, "r1", "worker-a", 60.0)
    store.acquire_lease("r1", "worker-b", 60.0, takeover_from="worker-a")

    with pytest.raises(LeaseLost):
        guard.check()

    assert isinstance(guard.lost, LeaseLost)
