"""The store contract: the behaviour every ``Store`` backend must have, as a pytest suite.

A backend author subclasses ``StoreContract``, provides a ``store`` fixture that yields a fresh,
empty store, and implements ``corrupt_record`` (damage one stored record the way a torn write or
a flipped bit would)::

    import pytest
    from unbroken.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(tmp_path)
            yield store
            store.close()

        def corrupt_record(self, store, run_id, seq):
            ...  # change the stored body of save record `seq`, keep its checksum

Every test states one behaviour in its name. The suite uses only the public ``Store`` API (plus
``corrupt_record``), so it runs unchanged on any backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from ..codec import EncodedSave, Encoder, encode_full
from ..errors import ConcurrentSave, CorruptCheckpoint, InvalidRunId, LeaseHeld, LeaseLost, RunNotFound
from ..state import LedgerEntry, RunState, ToolCall, ToolResult, idempotency_key
from ..stores.base import Store

BAD_RUN_IDS = ("../x", "/abs", "", "a\x00b", "x" * 201)
"""Run ids every store must refuse with ``InvalidRunId`` before touching anything."""

LONG_TTL = 60.0
SHORT_TTL = 0.2

# Messages in provider shapes, including a block type no provider has invented yet: stores must
# keep them exactly, in order (thinking signatures are sent back byte for byte).
MESSAGES: list[Any] = [
    {"role": "user", "content": "Book a table for two, tonight at 8."},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Check availability first.", "signature": "c2lnbmF0dXJl=="},
            {"type": "future_block_v9", "payload": {"nested": [1, 2.5, None, True, {"deep": ["x"]}]}},
            {"type": "text", "text": 'Checking\u2028now \n\t"quoted" \u00e9\u00e8 \U0001f37d'},
            {"type": "tool_use", "id": "toolu_1", "name": "find_table", "input": {"party": 2}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "table 7"}]},
    {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque+/=="}]},
    {"role": "assistant", "content": [{"type": "text", "text": ""}]},
]


class RunWriter:
    """Saves successive states of one run through ``store.append``, as the runner does."""

    def __init__(self, store: Store, run_id: str, *, task: str = "contract task", snapshot_every: int = 50) -> None:
        self.store = store
        self.state = RunState(run_id=run_id, task=task, created_at=1000.0, updated_at=1000.0)
        self.encoder = Encoder(snapshot_every=snapshot_every)

    def encode(
        self, label: str = "save", *, ledger: Sequence[LedgerEntry] = (), force_snapshot: bool = False
    ) -> EncodedSave:
        """The next save record, without writing it (``state.save_seq`` is advanced)."""
        self.state.save_seq += 1
        self.state.updated_at += 1.0
        return self.encoder.encode(self.state, label, ledger=ledger, force_snapshot=force_snapshot)

    def save(
        self,
        label: str = "save",
        *,
        fence: int | None = None,
        ledger: Sequence[LedgerEntry] = (),
        force_snapshot: bool = False,
    ) -> EncodedSave:
        encoded = self.encode(label, ledger=ledger, force_snapshot=force_snapshot)
        try:
            self.store.append(encoded, expect_seq=self.state.save_seq - 1, fence=fence)
        except BaseException:
            self.state.save_seq -= 1
            raise
        self.encoder.committed(self.state, encoded)
        return encoded

    def turn(self, step: int, *, fence: int | None = None) -> EncodedSave:
        """One turn's worth of change: a message, counters and business state, then a save."""
        self.state.messages.append({"role": "assistant", "content": [{"type": "text", "text": f"step {step}"}]})
        self.state.turns += 1
        self.state.tokens_used += 10 * step
        self.state.business_state[f"k{step % 3}"] = {"step": step, "items": list(range(step % 4))}
        self.state.usage = {"input_tokens": step, "output_tokens": 2 * step}
        return self.save(f"turn {step}", fence=fence)


def ledger_entry(run_id: str, call_id: str = "call_1", **changes: Any) -> LedgerEntry:
    """A pending ledger entry for ``call_id`` of run ``run_id``; keyword arguments override fields."""
    fields: dict[str, Any] = {
        "run_id": run_id,
        "key": idempotency_key(run_id, call_id),
        "call_id": call_id,
        "tool": "send_email",
        "args_hash": "a" * 64,
        "status": "pending",
        "attempts": 1,
        "result": None,
        "created_at": 1000.0,
        "updated_at": 1000.0,
    }
    fields.update(changes)
    return LedgerEntry(**fields)


def _comparable(state: RunState) -> tuple[dict[str, Any], list[Any]]:
    fields = state.small_fields()
    fields.pop("run_id")
    return fields, state.messages


def _raw_save(run_id: str) -> EncodedSave:
    state = RunState(run_id=run_id, task="t", save_seq=1)
    return Encoder().encode(state, "start")


_RUN_ID_CALLS: dict[str, Callable[[Store, str], object]] = {
    "append": lambda store, run_id: store.append(_raw_save(run_id), expect_seq=0),
    "read_records": lambda store, run_id: store.read_records(run_id),
    "load": lambda store, run_id: store.load(run_id),
    "rewrite": lambda store, run_id: store.rewrite(run_id, [_raw_save(run_id)], expect_seq=0),
    "delete_run": lambda store, run_id: store.delete_run(run_id),
    "ledger_claim": lambda store, run_id: store.ledger_claim(ledger_entry(run_id)),
    "ledger_put": lambda store, run_id: store.ledger_put(ledger_entry(run_id)),
    "ledger_get": lambda store, run_id: store.ledger_get(run_id, "ub_key"),
    "ledger_list": lambda store, run_id: store.ledger_list(run_id),
    "acquire_lease": lambda store, run_id: store.acquire_lease(run_id, "worker-a", LONG_TTL),
    "lease_of": lambda store, run_id: store.lease_of(run_id),
}


class StoreContract:
    """The behaviour every store must have. Subclass it, provide ``store``, implement ``corrupt_record``."""

    # ------------------------------------------------------------------ what the backend provides

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        raise NotImplementedError(
            "StoreContract needs a `store` fixture: define `@pytest.fixture def store(self): ...` in your "
            "subclass, yielding a fresh, empty store of your backend"
        )

    def corrupt_record(self, store: Store, run_id: str, seq: int) -> None:
        """Damage save record ``seq`` of ``run_id`` in the backend's storage: change its body and
        keep its checksum, as a torn write or a flipped bit would. ``tamper(body)`` gives a body."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement corrupt_record(store, run_id, seq): change the stored body of "
            "that save record without updating its checksum (for example body=StoreContract.tamper(body)), "
            "so the suite can check that damage is detected and load(recover=True) works"
        )

    @staticmethod
    def tamper(body: str) -> str:
        """``body`` with one character changed (the checksum no longer matches)."""
        middle = len(body) // 2
        replacement = "0" if body[middle] != "0" else "1"
        return body[:middle] + replacement + body[middle + 1 :]

    # ------------------------------------------------------------------ records

    def test_append_then_load_returns_every_message_exactly_and_in_order(self, store: Store) -> None:
        run = RunWriter(store, "run-messages")
        for message in MESSAGES:
            run.state.messages.append(message)
            run.save()
        run.state.business_state = {"cart": [{"sku": "A-1", "qty": 2}], "note": "\u00e9\u00e8", "n": None}
        run.state.pending_calls = [ToolCall("toolu_1", "find_table", {"party": 2}, "ub_k1")]
        run.state.results = {"toolu_1": ToolResult("toolu_1", "table 7", False, "executed")}
        run.save()

        loaded = store.load("run-messages")

        assert loaded.messages == MESSAGES
        assert _comparable(loaded) == _comparable(run.state)

    def test_records_come_back_in_seq_order_with_body_and_checksum_verbatim(self, store: Store) -> None:
        run = RunWriter(store, "run-verbatim")
        written = [run.turn(step) for step in range(1, 5)]

        records = store.read_records("run-verbatim")

        assert [(r.seq, r.body, r.checksum) for r in records] == [(s.seq, s.body, s.checksum) for s in written]

    def test_snapshot_and_deltas_fold_to_the_same_state_as_snapshots_only(self, store: Store) -> None:
        deltas = RunWriter(store, "run-deltas", snapshot_every=4)
        snapshots = RunWriter(store, "run-snapshots")
        for step in range(1, 11):
            for run in (deltas, snapshots):
                run.state.messages.append({"role": "user", "content": f"m{step}"})
                run.state.turns = step
                run.state.tokens_used += step
                run.state.business_state[f"k{step % 3}"] = step
                if step == 6:
                    run.state.phase = "running_tools"
                run.save(force_snapshot=run is snapshots)

        from_deltas = store.load("run-deltas")
        from_snapshots = store.load("run-snapshots")

        assert not all(info.snapshot for info in store.history("run-deltas"))
        assert _comparable(from_deltas) == _comparable(from_snapshots) == _comparable(deltas.state)

    def test_history_lists_every_save_point_oldest_first(self, store: Store) -> None:
        run = RunWriter(store, "run-history")
        for step in range(1, 4):
            run.turn(step)

        timeline = store.history("run-history")

        assert [info.seq for info in timeline] == [1, 2, 3]
        assert [info.label for info in timeline] == ["turn 1", "turn 2", "turn 3"]
        assert timeline[0].snapshot

    def test_exists_is_true_only_for_a_saved_run(self, store: Store) -> None:
        RunWriter(store, "run-exists").turn(1)
        store.acquire_lease("run-leased-only", "worker-a", LONG_TTL)

        assert store.exists("run-exists")
        assert not store.exists("run-leased-only")
        assert not store.exists("run-never")

    def test_append_with_a_stale_expect_seq_raises_concurrent_save_and_writes_nothing(self, store: Store) -> None:
        run = RunWriter(store, "run-cas")
        run.turn(1)
        rival = RunWriter(store, "run-cas")
        rival.state = store.load("run-cas")
        rival.encoder.prime(rival.state)
        run.turn(2)  # the run moves on without the rival knowing
        before = store.read_records("run-cas")
        rival.state.messages.append({"role": "user", "content": "rival"})

        with pytest.raises(ConcurrentSave):
            rival.save(ledger=[ledger_entry("run-cas", "call_rival")])

        assert store.read_records("run-cas") == before
        assert store.ledger_get("run-cas", idempotency_key("run-cas", "call_rival")) is None

    def test_append_of_a_new_run_over_an_existing_one_raises_concurrent_save(self, store: Store) -> None:
        RunWriter(store, "run-taken").turn(1)
        before = store.read_records("run-taken")
        newcomer = RunWriter(store, "run-taken", task="another task")

        with pytest.raises(ConcurrentSave):
            newcomer.save(ledger=[ledger_entry("run-taken", "call_new")])

        assert store.read_records("run-taken") == before
        assert store.ledger_get("run-taken", idempotency_key("run-taken", "call_new")) is None

    def test_append_with_expect_seq_ahead_of_the_head_raises_concurrent_save(self, store: Store) -> None:
        run = RunWriter(store, "run-ahead")
        run.turn(1)
        before = store.read_records("run-ahead")
        run.state.save_seq = 4  # the writer believes it is further along than the store

        with pytest.raises(ConcurrentSave):
            run.turn(5)

        assert store.read_records("run-ahead") == before

    def test_rewrite_replaces_every_record_and_appends_continue_after_it(self, store: Store) -> None:
        run = RunWriter(store, "run-rewrite")
        for step in range(1, 6):
            run.turn(step)
        state = store.load("run-rewrite")
        state.save_seq = 6
        compacted = encode_full(state, "compacted")

        store.rewrite("run-rewrite", [compacted], expect_seq=5)

        records = store.read_records("run-rewrite")
        assert [(r.seq, r.body) for r in records] == [(6, compacted.body)]
        assert _comparable(store.load("run-rewrite")) == _comparable(state)
        run.encoder.prime(state)
        run.state = state
        run.turn(7)
        assert store.load("run-rewrite").save_seq == 7

    def test_rewrite_with_a_stale_expect_seq_raises_concurrent_save_and_changes_nothing(self, store: Store) -> None:
        run = RunWriter(store, "run-rewrite-cas")
        run.turn(1)
        run.turn(2)
        before = store.read_records("run-rewrite-cas")
        state = store.load("run-rewrite-cas")
        state.save_seq = 3

        with pytest.raises(ConcurrentSave):
            store.rewrite("run-rewrite-cas", [encode_full(state, "compacted")], expect_seq=1)

        assert store.read_records("run-rewrite-cas") == before

    def test_unknown_run_raises_run_not_found(self, store: Store) -> None:
        with pytest.raises(RunNotFound):
            store.read_records("run-missing")
        with pytest.raises(RunNotFound):
            store.load("run-missing")

    def test_list_runs_summarises_each_saved_run_most_recently_updated_first(self, store: Store) -> None:
        older = RunWriter(store, "run-older", task="older task")
        older.turn(1)
        newer = RunWriter(store, "run-newer", task="newer task")
        newer.state.updated_at = 5000.0
        newer.turn(1)
        newer.state.phase = "completed"
        newer.state.output = "done"
        newer.save("finish")
        store.acquire_lease("run-leased-only", "worker-a", LONG_TTL)

        summaries = store.list_runs()

        assert [s.run_id for s in summaries] == ["run-newer", "run-older"]
        first = summaries[0]
        assert (first.task, first.phase, first.turns, first.tokens_used, first.save_seq, first.updated_at) == (
            "newer task",
            "completed",
            1,
            10,
            2,
            newer.state.updated_at,
        )

    def test_delete_run_removes_records_ledger_and_lease_and_is_safe_twice(self, store: Store) -> None:
        lease = store.acquire_lease("run-doomed", "worker-a", LONG_TTL)
        RunWriter(store, "run-doomed").save(fence=lease.fence, ledger=[ledger_entry("run-doomed")])

        store.delete_run("run-doomed")
        store.delete_run("run-doomed")
        store.delete_run("run-never-existed")

        assert not store.exists("run-doomed")
        assert store.ledger_list("run-doomed") == []
        assert store.lease_of("run-doomed") is None
        assert "run-doomed" not in [s.run_id for s in store.list_runs()]

    def test_a_deleted_run_id_can_be_used_again(self, store: Store) -> None:
        RunWriter(store, "run-reused").turn(1)
        store.delete_run("run-reused")

        again = RunWriter(store, "run-reused", task="second life")
        again.turn(1)

        assert store.load("run-reused").task == "second life"

    # ------------------------------------------------------------------ damage

    def test_a_tampered_last_record_raises_corrupt_checkpoint_on_load(self, store: Store) -> None:
        run = RunWriter(store, "run-torn")
        for step in range(1, 4):
            run.turn(step)
        self.corrupt_record(store, "run-torn", 3)

        with pytest.raises(CorruptCheckpoint) as caught:
            store.load("run-torn")

        assert caught.value.last_good_seq == 2

    def test_load_with_recover_returns_the_last_intact_save_point(self, store: Store) -> None:
        run = RunWriter(store, "run-recover")
        run.turn(1)
        run.turn(2)
        at_two = _comparable(store.load("run-recover"))
        run.turn(3)
        run.turn(4)
        self.corrupt_record(store, "run-recover", 3)

        recovered = store.load("run-recover", recover=True)

        assert recovered.save_seq == 2
        assert _comparable(recovered) == at_two

    # ------------------------------------------------------------------ fences

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

    def test_ledger_claim_with_a_stale_fence_raises_lease_lost_and_writes_nothing(self, store: Store) -> None:
        _, stale = self._fenced_run(store, "run-fence-claim")
        entry = ledger_entry("run-fence-claim")

        with pytest.raises(LeaseLost):
            store.ledger_claim(entry, fence=stale)

        assert store.ledger_get("run-fence-claim", entry.key) is None

    def test_ledger_put_with_a_stale_fence_raises_lease_lost_and_writes_nothing(self, store: Store) -> None:
        _, stale = self._fenced_run(store, "run-fence-put")
        entry = ledger_entry("run-fence-put")

        with pytest.raises(LeaseLost):
            store.ledger_put(entry, fence=stale)

        assert store.ledger_get("run-fence-put", entry.key) is None

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

    # ------------------------------------------------------------------ effect ledger

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

    # ------------------------------------------------------------------ run ids

    @pytest.mark.parametrize("method", sorted(_RUN_ID_CALLS))
    @pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=["dotdot", "absolute", "empty", "nul", "too-long"])
    def test_an_invalid_run_id_raises_invalid_run_id(self, store: Store, method: str, run_id: str) -> None:
        with pytest.raises(InvalidRunId):
            _RUN_ID_CALLS[method](store, run_id)


__all__ = ["BAD_RUN_IDS", "MESSAGES", "RunWriter", "StoreContract", "ledger_entry"]
