"""The contract on leases and fences: one owner at a time, and a stale fence writes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ...codec import encode_full
from ...errors import LeaseHeld, LeaseLost
from ...state import LedgerEntry, idempotency_key
from ...stores.base import Store
from ._base import ContractBase
from ._support import LONG_TTL, SHORT_TTL, RunWriter, ledger_entry


class LeasesContract(ContractBase):
    """Leases bump the fence; a write under a fence that was taken over raises ``LeaseLost``."""

    def _fenced_run(self, store: Store, run_id: str) -> tuple[RunWriter, int]:
        """A run saved under worker-a's lease, then taken over by worker-b. Returns a's stale fence."""
        stale = store.acquire_lease(run_id, "worker-a", LONG_TTL)
        run = RunWriter(store, run_id)
        run.turn(1, fence=stale.fence)
        store.acquire_lease(run_id, "worker-b", LONG_TTL, takeover_from="worker-a")
        return run, stale.fence

    def test_append_with_a_stale_fence_raises_lease_lost_and_writes_nothing(self, store: Store) -> None:
        run, stale = self._fenced_run(store, "run-fence-append")
        before = store.read_records("run-fence-append")

        with pytest.raises(LeaseLost):
            run.save(fence=stale, ledger=[ledger_entry("run-fence-append", "call_late")])

        assert store.read_records("run-fence-append") == before
        assert store.ledger_get("run-fence-append", idempotency_key("run-fence-append", "call_late")) is None

    def test_append_without_ledger_entries_with_a_stale_fence_raises_lease_lost_and_writes_nothing(
        self, store: Store
    ) -> None:
        # A store may write a save without ledger entries another way (PostgreSQL: a leaner
        # statement); the fence holds there too.
        run, stale = self._fenced_run(store, "run-fence-plain")
        before = store.read_records("run-fence-plain")
        summary = store.list_runs()

        with pytest.raises(LeaseLost):
            run.save(fence=stale)

        assert store.read_records("run-fence-plain") == before
        assert store.list_runs() == summary

    def _assert_stale_fence_ledger_write_is_refused(
        self, store: Store, run_id: str, write: Callable[[LedgerEntry, int], object]
    ) -> None:
        """``write(entry, stale_fence)`` raises ``LeaseLost`` and leaves no ledger entry."""
        _, stale = self._fenced_run(store, run_id)
        entry = ledger_entry(run_id)

        with pytest.raises(LeaseLost):
            write(entry, stale)

        assert store.ledger_get(run_id, entry.key) is None

    def test_ledger_claim_with_a_stale_fence_raises_lease_lost_and_writes_nothing(self, store: Store) -> None:
        self._assert_stale_fence_ledger_write_is_refused(
            store, "run-fence-claim", lambda entry, fence: store.ledger_claim(entry, fence=fence)
        )

    def test_ledger_put_with_a_stale_fence_raises_lease_lost_and_writes_nothing(self, store: Store) -> None:
        self._assert_stale_fence_ledger_write_is_refused(
            store, "run-fence-put", lambda entry, fence: store.ledger_put(entry, fence=fence)
        )

    def test_rewrite_with_a_stale_fence_raises_lease_lost_and_changes_nothing(self, store: Store) -> None:
        _, stale = self._fenced_run(store, "run-fence-rewrite")
        before = store.read_records("run-fence-rewrite")
        state = store.load("run-fence-rewrite")
        state.save_seq = 2

        with pytest.raises(LeaseLost):
            store.rewrite("run-fence-rewrite", [encode_full(state, "compacted")], expect_seq=1, fence=stale)

        assert store.read_records("run-fence-rewrite") == before

    def test_writes_with_the_current_fence_succeed(self, store: Store) -> None:
        run, _ = self._fenced_run(store, "run-fence-current")
        current = store.lease_of("run-fence-current")
        assert current is not None

        run.turn(2, fence=current.fence)
        store.ledger_put(ledger_entry("run-fence-current"), fence=current.fence)

        assert store.load("run-fence-current").save_seq == 2

    # ------------------------------------------------------------------ leases

    def test_acquire_lease_bumps_the_fence_every_time(self, store: Store) -> None:
        first = store.acquire_lease("run-lease", "worker-a", LONG_TTL)
        second = store.acquire_lease("run-lease", "worker-a", LONG_TTL)

        assert second.fence > first.fence
        held = store.lease_of("run-lease")
        assert held is not None
        assert (held.owner, held.fence) == ("worker-a", second.fence)

    def test_acquire_lease_held_live_by_another_owner_raises_lease_held(self, store: Store) -> None:
        first = store.acquire_lease("run-held", "worker-a", LONG_TTL)

        with pytest.raises(LeaseHeld):
            store.acquire_lease("run-held", "worker-b", LONG_TTL)

        held = store.lease_of("run-held")
        assert held is not None
        assert (held.owner, held.fence) == ("worker-a", first.fence)

    def test_takeover_from_a_named_dead_owner_replaces_it(self, store: Store) -> None:
        dead = store.acquire_lease("run-takeover", "worker-a", LONG_TTL)

        taken = store.acquire_lease("run-takeover", "worker-b", LONG_TTL, takeover_from="worker-a")

        assert taken.owner == "worker-b"
        assert taken.fence > dead.fence
        with pytest.raises(LeaseLost):
            store.renew_lease(dead, LONG_TTL)

    def test_takeover_from_someone_else_than_the_holder_raises_lease_held(self, store: Store) -> None:
        store.acquire_lease("run-wrong-takeover", "worker-a", LONG_TTL)

        with pytest.raises(LeaseHeld):
            store.acquire_lease("run-wrong-takeover", "worker-b", LONG_TTL, takeover_from="worker-c")

    def test_renew_lease_extends_it_under_the_same_fence(self, store: Store) -> None:
        lease = store.acquire_lease("run-renew", "worker-a", SHORT_TTL)

        renewed = store.renew_lease(lease, LONG_TTL)

        assert renewed.fence == lease.fence
        assert renewed.expires_at > lease.expires_at
        time.sleep(SHORT_TTL + 0.1)
        held = store.lease_of("run-renew")
        assert held is not None
        assert held.owner == "worker-a"

    def test_release_lease_lets_another_owner_acquire_it(self, store: Store) -> None:
        lease = store.acquire_lease("run-release", "worker-a", LONG_TTL)

        store.release_lease(lease)

        assert store.lease_of("run-release") is None
        taken = store.acquire_lease("run-release", "worker-b", LONG_TTL)
        assert taken.fence > lease.fence
        with pytest.raises(LeaseLost):
            store.renew_lease(lease, LONG_TTL)

    def test_releasing_a_lease_that_was_taken_over_changes_nothing(self, store: Store) -> None:
        stale = store.acquire_lease("run-release-stale", "worker-a", LONG_TTL)
        current = store.acquire_lease("run-release-stale", "worker-b", LONG_TTL, takeover_from="worker-a")

        store.release_lease(stale)

        held = store.lease_of("run-release-stale")
        assert held is not None
        assert (held.owner, held.fence) == ("worker-b", current.fence)

    def test_an_expired_lease_can_be_taken_by_another_owner(self, store: Store) -> None:
        expired = store.acquire_lease("run-expired", "worker-a", SHORT_TTL)
        time.sleep(SHORT_TTL + 0.15)

        assert store.lease_of("run-expired") is None
        taken = store.acquire_lease("run-expired", "worker-b", LONG_TTL)
        assert taken.fence > expired.fence

    def test_lease_of_a_run_nobody_leased_is_none(self, store: Store) -> None:
        assert store.lease_of("run-unleased") is None
