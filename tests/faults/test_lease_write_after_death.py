"""A process killed while its lease write is in flight: a server (PostgreSQL is one) may commit
the write after the process died. A resume that read the head just before that commit judged a
head without that holder; the store's swap then finds the dead process's fresh lease. The holder
the store saw must be judged by the same rule (provably dead: taken over at once), not refused
for 30 seconds. Found by the PostgreSQL random-kill sweep in CI (tests/reliability,
``test_random_sigkills_from_outside_break_no_invariant[postgres-fast]``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from unbroken import open_store
from unbroken.errors import LeaseHeld
from unbroken.leases import take_lease
from unbroken.stores.base import Store
from unbroken.testing.contract._support import frozen_process


@pytest.fixture
def dead_owner() -> Iterator[str]:
    """The lease owner name of a real process of this host that has exited."""
    with frozen_process() as owner:
        pass  # killed and reaped on leaving
    yield owner


def _stale_first_read(store: Store, monkeypatch: pytest.MonkeyPatch, reads: int = 1) -> None:
    """The next ``reads`` head reads see the head from before the dead process's lease write."""
    real = store.head_of
    left = [reads]

    def head_of(run_id: str) -> Any:
        if left[0] > 0:
            left[0] -= 1
            return None
        return real(run_id)

    monkeypatch.setattr(store, "head_of", head_of)


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_a_lease_a_dead_process_wrote_after_the_head_was_read_is_taken_over(
    url: str, dead_owner: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(url if url != "sqlite" else f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        store.acquire_lease("r1", dead_owner, 30.0)  # committed as the writer died
        _stale_first_read(store, monkeypatch)
        guard = take_lease(store, "r1", "vm:1:1:resumer", 30.0)
        assert guard.lease.owner == "vm:1:1:resumer"
        assert guard.takeover.how == "dead_holder"  # judged on the head the store saw
    finally:
        store.close()


def test_a_live_holder_the_store_saw_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Judging again is the same rule: a holder not provably dead keeps its lease."""
    store = open_store("memory://")
    try:
        store.acquire_lease("r1", "elsewhere:1:1:nonce", 30.0)  # another host's: cannot be proven dead
        _stale_first_read(store, monkeypatch, reads=5)
        with pytest.raises(LeaseHeld, match="held by elsewhere"):
            take_lease(store, "r1", "vm:1:1:resumer", 30.0)
    finally:
        store.close()
