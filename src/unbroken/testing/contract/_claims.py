"""The contract on submit and claim (workers): a store declaring ``claim`` hands each queued run
to one worker at a time; a store without it says so with ``Unsupported``, never does less."""

from __future__ import annotations

import threading
import time

import pytest

from ...errors import LeaseLost, RunNotFound, RunQueued, StoreDataLost, TaskMismatch, Unsupported
from ...lost import park, release
from ...state import RunSummary
from ...stores.base import ClaimedRun, Store
from ._base import ContractBase
from ._support import LONG_TTL, SHORT_TTL, RunWriter, frozen_process


def _claims(store: Store) -> bool:
    """Whether the store declares ``claim``; if not, checks that both entry points refuse clearly."""
    if "claim" in store.capabilities:
        return True
    with pytest.raises(Unsupported, match="cannot"):
        store.submit("task", "run-unsupported")
    with pytest.raises(Unsupported, match="cannot"):
        store.claim_runnable("worker-a", LONG_TTL)
    return False


class ClaimContract(ContractBase):
    """``submit`` queues a run once; ``claim_runnable`` leases each runnable run to one worker."""

    def test_a_store_without_claim_refuses_submit_and_claim_with_unsupported(self, store: Store) -> None:
        if "claim" in store.capabilities:
            run_id = store.submit("task", "run-supported")  # declared, so it must work
            assert [c.run_id for c in store.claim_runnable("worker-a", LONG_TTL)] == [run_id]
        else:
            assert not _claims(store)

    def test_a_run_parked_as_lost_is_never_claimed_until_an_operator_releases_it(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("task", "run-parked")
        store.submit("task", "run-next")

        assert park(store, "run-parked") and not park(store, "run-parked")  # once
        taken = [c.run_id for c in store.claim_runnable("worker-a", LONG_TTL, limit=5)]
        release(store, "run-parked")
        again = [c.run_id for c in store.claim_runnable("worker-b", LONG_TTL, limit=5)]

        assert (taken, again) == (["run-next"], ["run-parked"])

    def test_submit_twice_with_the_same_task_is_safe_and_queues_one_run(self, store: Store) -> None:
        if not _claims(store):
            return
        first = store.submit("write the report", "run-twice", agent="writer")
        second = store.submit("write the report", "run-twice", agent="writer")

        assert first == second == "run-twice"
        assert [s.run_id for s in store.queued_runs()] == ["run-twice"]

    def test_loading_a_queued_run_says_it_is_queued_not_missing(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("write the report", "run-queued")

        with pytest.raises(RunQueued, match="queued"):
            store.load("run-queued")
        with pytest.raises(RunNotFound) as missing:
            store.load("run-never-submitted")
        assert not isinstance(missing.value, RunQueued)

    def test_submit_of_another_task_under_a_queued_run_id_raises_task_mismatch(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("write the report", "run-mismatch")

        with pytest.raises(TaskMismatch):
            store.submit("delete everything", "run-mismatch")

        assert [(s.run_id, s.task) for s in store.queued_runs()] == [("run-mismatch", "write the report")]

    def test_submit_of_another_task_under_a_saved_run_id_raises_task_mismatch(self, store: Store) -> None:
        if not _claims(store):
            return
        RunWriter(store, "run-saved", task="the saved task").turn(1)

        with pytest.raises(TaskMismatch):
            store.submit("another task", "run-saved")

        assert store.claim_runnable("worker-a", LONG_TTL) == []

    def test_submit_without_a_run_id_returns_a_new_one(self, store: Store) -> None:
        if not _claims(store):
            return
        first, second = store.submit("t"), store.submit("t")

        assert first != second
        assert {s.run_id for s in store.queued_runs()} == {first, second}

    def test_claim_leases_a_submitted_run_to_the_worker(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("the task", "run-claim-me", agent="writer")
        before = store.lease_now()

        (claimed,) = store.claim_runnable("worker-a", LONG_TTL)

        assert (claimed.run_id, claimed.task, claimed.agent) == ("run-claim-me", "the task", "writer")
        assert claimed.lease.owner == "worker-a"
        assert claimed.lease.expires_at >= before + LONG_TTL - 1.0
        held = store.lease_of("run-claim-me")
        assert held is not None and (held.owner, held.fence) == ("worker-a", claimed.lease.fence)

    def test_a_claimed_run_is_not_claimed_again_while_its_lease_is_live(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("t", "run-claimed-once")
        store.claim_runnable("worker-a", LONG_TTL)

        assert store.claim_runnable("worker-b", LONG_TTL) == []

    def test_a_run_whose_lease_expired_is_claimable_again_under_a_new_fence(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("t", "run-expired-claim")
        (first,) = store.claim_runnable("worker-a", SHORT_TTL)
        time.sleep(SHORT_TTL + 0.3)

        (second,) = store.claim_runnable("worker-b", LONG_TTL)

        assert second.run_id == "run-expired-claim"
        assert second.lease.owner == "worker-b"
        assert second.lease.fence > first.lease.fence

    def test_an_expired_lease_whose_holder_is_alive_on_this_host_is_not_claimed(self, store: Store) -> None:
        """The claim rule (``stores.backend.claimable``) on every store, one-step claims too: a
        process of this host that lost its lease may still be acting (here frozen by SIGSTOP),
        so its run waits, expired or not; once that process is gone it is taken at once."""
        if not _claims(store):
            return
        store.submit("t", "run-frozen-holder")
        store.submit("t", "run-behind-it")
        with frozen_process() as holder:
            (held,) = store.claim_runnable(holder, SHORT_TTL)
            time.sleep(SHORT_TTL + 0.3)

            taken = [c.run_id for c in store.claim_runnable("worker-b", LONG_TTL, limit=5)]
            head = store.backend.read_head("run-frozen-holder")  # expired: lease_of says None

        (again,) = store.claim_runnable("worker-c", LONG_TTL, limit=5)  # the holder is gone now

        assert held.run_id == "run-frozen-holder"
        assert taken == ["run-behind-it"]
        assert head is not None and (head.owner, head.fence) == (holder, held.lease.fence)
        assert (again.run_id, again.lease.owner) == ("run-frozen-holder", "worker-c")
        assert again.lease.fence > held.lease.fence

    def test_a_claim_after_the_store_lost_everything_gets_a_fence_above_the_old_holders(self, store: Store) -> None:
        """A claim's fence has the floor of every new fence (``stores.base.next_fence``): the
        store's clock in microseconds, so a holder from before a total loss is refused."""
        if not _claims(store):
            return
        store.submit("t", "run-claim-lost")
        (first,) = store.claim_runnable("worker-a", LONG_TTL)
        RunWriter(store, "run-claim-lost", task="t").turn(1, fence=first.lease.fence)
        store.delete_run("run-claim-lost")  # the server came back empty...
        store.submit("t", "run-claim-lost")  # ...and the run was queued again

        (second,) = store.claim_runnable("worker-b", LONG_TTL)

        assert second.lease.fence > first.lease.fence
        assert second.lease.previous_fence == 0
        with pytest.raises((LeaseLost, StoreDataLost)):
            RunWriter(store, "run-claim-lost", task="t").turn(1, fence=first.lease.fence)
        assert store.records_since("run-claim-lost", 0) == []

    @pytest.mark.parametrize("phase", ["completed", "failed", "max_turns", "paused", "awaiting_approval"])
    def test_a_finished_or_paused_run_is_never_claimed(self, store: Store, phase: str) -> None:
        if not _claims(store):
            return
        store.submit("t", "run-stopped")
        run = RunWriter(store, "run-stopped", task="t")
        run.turn(1)
        run.state.phase = phase  # type: ignore[assignment]
        run.save(phase)

        assert store.claim_runnable("worker-a", LONG_TTL) == []

    def test_claim_for_an_agent_takes_only_runs_submitted_for_it(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("t", "run-for-writer", agent="writer")
        store.submit("t", "run-for-reader", agent="reader")

        mine = store.claim_runnable("worker-a", LONG_TTL, agent="reader", limit=5)
        rest = store.claim_runnable("worker-b", LONG_TTL, limit=5)

        assert [c.run_id for c in mine] == ["run-for-reader"]
        assert [c.run_id for c in rest] == ["run-for-writer"]

    def test_claim_takes_at_most_limit_runs_oldest_submitted_first(self, store: Store) -> None:
        if not _claims(store):
            return
        for n in range(4):
            store.submit("t", f"run-queued-{n}")
            time.sleep(0.01)

        claimed = store.claim_runnable("worker-a", LONG_TTL, limit=2)

        assert [c.run_id for c in claimed] == ["run-queued-0", "run-queued-1"]

    def test_a_claimed_lease_fences_the_runs_saves(self, store: Store) -> None:
        if not _claims(store):
            return
        store.submit("t", "run-claim-fence")
        (claimed,) = store.claim_runnable("worker-a", LONG_TTL)

        RunWriter(store, "run-claim-fence", task="t").turn(1, fence=claimed.lease.fence)

        assert store.load("run-claim-fence").save_seq == 1

    def test_concurrent_claimers_never_get_the_same_run(self, store: Store) -> None:
        if not _claims(store):
            return
        run_ids = [f"run-raced-{n}" for n in range(6)]
        for run_id in run_ids:
            store.submit("t", run_id)
        barrier = threading.Barrier(6)
        got: list[ClaimedRun] = []
        errors: list[BaseException] = []
        guard = threading.Lock()

        def claim(worker: int) -> None:
            try:
                barrier.wait()
                for _ in range(3):
                    claimed = store.claim_runnable(f"worker-{worker}", LONG_TTL, limit=2)
                    with guard:
                        got.extend(claimed)
            except BaseException as exc:  # reported below, in the test's thread
                with guard:
                    errors.append(exc)

        threads = [threading.Thread(target=claim, args=(worker,)) for worker in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)

        assert errors == []
        assert sorted(c.run_id for c in got) == run_ids  # each run exactly once
        for claimed in got:
            held = store.lease_of(claimed.run_id)
            assert held is not None and (held.owner, held.fence) == (claimed.lease.owner, claimed.lease.fence)

    def test_a_run_that_finishes_while_a_claim_is_deciding_is_not_claimed(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        if not _claims(store):
            return
        store.submit("t", "run-finishing")
        run = RunWriter(store, "run-finishing", task="t")
        run.turn(1)
        real = store.backend.list_summaries
        finished: list[bool] = []

        def then_finish() -> list[RunSummary]:
            seen = real()
            if not finished:  # the run completes right after the claim looked at the phases
                run.state.phase = "completed"
                run.save("finish")
                finished.append(True)
            return seen

        monkeypatch.setattr(store.backend, "list_summaries", then_finish)  # a store deciding in SQL never calls it

        claimed = store.claim_runnable("worker-a", LONG_TTL)

        assert store.load("run-finishing").phase != "completed" or claimed == []
