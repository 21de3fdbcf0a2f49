"""The contract on the effect ledger: claim is insert-if-absent, even under racing threads."""

from __future__ import annotations

import threading

from ...state import LedgerEntry, ToolResult
from ...stores.base import Store
from ._base import ContractBase
from ._support import RunWriter, ledger_entry


class LedgerContract(ContractBase):
    """Ledger entries are claimed once, replaced by put, scoped to their run and collected when old."""

    def test_ledger_claim_inserts_only_if_the_key_is_absent(self, store: Store) -> None:
        first = ledger_entry("run-claim", tool="first")
        second = ledger_entry("run-claim", tool="second", attempts=2)

        stored, created = store.ledger_claim(first)
        again, created_again = store.ledger_claim(second)

        assert (stored, created) == (first, True)
        assert (again, created_again) == (first, False)
        assert store.ledger_get("run-claim", first.key) == first

    def test_ledger_claims_racing_from_eight_threads_create_exactly_one_entry(self, store: Store) -> None:
        barrier = threading.Barrier(8)
        outcomes: list[tuple[LedgerEntry, bool]] = []
        errors: list[BaseException] = []
        guard = threading.Lock()

        def claim(worker: int) -> None:
            try:
                barrier.wait()
                outcome = store.ledger_claim(ledger_entry("run-race", tool=f"worker-{worker}"))
            except BaseException as exc:  # reported below, in the test's thread
                with guard:
                    errors.append(exc)
                return
            with guard:
                outcomes.append(outcome)

        threads = [threading.Thread(target=claim, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

        assert errors == []
        winners = [entry for entry, created in outcomes if created]
        assert len(outcomes) == 8
        assert len(winners) == 1
        assert all(entry == winners[0] for entry, _ in outcomes)
        assert store.ledger_get("run-race", winners[0].key) == winners[0]

    def test_ledger_put_replaces_the_entry(self, store: Store) -> None:
        pending = ledger_entry("run-put")
        store.ledger_put(pending)
        done = ledger_entry(
            "run-put", status="succeeded", result=ToolResult("call_1", "sent", False), updated_at=2000.0
        )

        store.ledger_put(done)

        assert store.ledger_get("run-put", pending.key) == done
        assert store.ledger_list("run-put") == [done]

    def test_ledger_entries_saved_with_an_append_are_visible(self, store: Store) -> None:
        entries = [ledger_entry("run-with-ledger", f"call_{n}", created_at=1000.0 + n) for n in range(3)]
        RunWriter(store, "run-with-ledger").save(ledger=entries)

        for entry in entries:
            assert store.ledger_get("run-with-ledger", entry.key) == entry
        assert store.ledger_list("run-with-ledger") == entries

    def test_the_fence_an_attempt_started_under_round_trips(self, store: Store) -> None:
        # The takeover rule reads it back (fencing.LeaseGuard.started_before_predecessor).
        writer = RunWriter(store, "run-fence")
        writer.save("created")
        lease = store.acquire_lease("run-fence", "worker-1", 60.0)
        claimed = ledger_entry("run-fence", "call_1", fence=lease.fence)
        assert store.ledger_claim(claimed, fence=lease.fence) == (claimed, True)
        retried = ledger_entry("run-fence", "call_2", fence=lease.fence, attempts=3, created_at=1001.0)
        store.ledger_put(retried, fence=lease.fence)
        done = ledger_entry(
            "run-fence",
            "call_3",
            fence=lease.fence,
            status="succeeded",
            result=ToolResult(call_id="call_3", content="ok"),
            created_at=1002.0,
        )
        writer.save("with an outcome", fence=lease.fence, ledger=[done])
        unfenced = ledger_entry("run-fence", "call_4", created_at=1003.0)  # written outside a lease
        store.ledger_put(unfenced)

        every = [claimed, retried, done, unfenced]
        assert [store.ledger_get("run-fence", entry.key) for entry in every] == every
        assert store.ledger_list("run-fence") == every
        assert store.ledger_page("run-fence", limit=10) == every[::-1]
        assert [entry.fence for entry in every] == [lease.fence] * 3 + [None]

    def test_ledger_get_does_not_see_entries_of_another_run(self, store: Store) -> None:
        entry = ledger_entry("run-owner")
        store.ledger_put(entry)

        assert store.ledger_get("run-other", entry.key) is None
        assert store.ledger_list("run-other") == []

    def test_ledger_list_returns_entries_oldest_first(self, store: Store) -> None:
        entries = [
            ledger_entry("run-order", f"call_{n}", created_at=created) for n, created in enumerate([3.0, 1.0, 2.0])
        ]
        for entry in entries:
            store.ledger_put(entry)

        assert [e.created_at for e in store.ledger_list("run-order")] == [1.0, 2.0, 3.0]

    def test_ledger_gc_removes_only_old_entries_of_finished_runs(self, store: Store) -> None:
        finished = RunWriter(store, "run-finished")
        finished.turn(1)
        finished.state.phase = "completed"
        finished.save("finish")
        RunWriter(store, "run-live").turn(1)
        old_finished = ledger_entry("run-finished", "call_old", updated_at=100.0)
        new_finished = ledger_entry("run-finished", "call_new", updated_at=5000.0)
        old_live = ledger_entry("run-live", "call_old", updated_at=100.0)
        for entry in (old_finished, new_finished, old_live):
            store.ledger_put(entry)

        removed = store.ledger_gc(older_than=1000.0)

        assert removed == 1
        assert store.ledger_list("run-finished") == [new_finished]
        assert store.ledger_list("run-live") == [old_live]

    def test_one_key_in_two_runs_is_two_entries_and_neither_run_touches_the_other(self, store: Store) -> None:
        """Ledger keys are unique per run, never across the store: a run whose calls reuse another
        run's idempotency keys (an imported checkpoint, a provider reusing ``call_0``) claims,
        replaces, lists and deletes its own entries only."""
        shared = "shared-key"
        victim = ledger_entry("run-victim", key=shared, status="succeeded", result=ToolResult("call_1", "charged"))
        RunWriter(store, "run-victim").save(ledger=[victim])

        stranger = ledger_entry("run-stranger", key=shared, tool="other", created_at=2000.0, updated_at=2000.0)
        assert store.ledger_claim(stranger) == (stranger, True)  # its own key, not the victim's entry
        replaced = ledger_entry(
            "run-stranger", key=shared, status="failed", result=ToolResult("call_1", "no", True), updated_at=3000.0
        )
        store.ledger_put(replaced)
        RunWriter(store, "run-saver").save(ledger=[ledger_entry("run-saver", key=shared, tool="third")])

        assert store.ledger_get("run-victim", shared) == victim  # unchanged, and its checksum holds
        assert store.ledger_list("run-victim") == [victim]
        assert store.ledger_list("run-stranger") == [replaced]
        assert [e.tool for e in store.ledger_list("run-saver")] == ["third"]
        store.delete_run("run-stranger")
        assert store.ledger_get("run-victim", shared) == victim
        assert store.ledger_claim(ledger_entry("run-victim", key=shared, tool="again")) == (victim, False)
