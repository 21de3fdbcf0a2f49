"""The contract on save records: append, compare-and-set, rewrite, history, list and delete."""

from __future__ import annotations

import pytest

from ...codec import encode_full
from ...errors import ConcurrentSave, RunNotFound
from ...state import ToolCall, ToolResult, idempotency_key
from ...stores.base import Store
from ._base import ContractBase
from ._support import LONG_TTL, MESSAGES, RunWriter, comparable, ledger_entry


class RecordsContract(ContractBase):
    """Save records come back exactly, in order; compare-and-set and rewrite are atomic."""

    def test_append_then_load_returns_every_message_exactly_and_in_order(self, store: Store) -> None:
        run = RunWriter(store, "run-messages")
        for message in MESSAGES:
            run.state.messages.append(message)
            run.save()
        run.state.business_state = {"cart": [{"sku": "A-1", "qty": 2}], "note": "\u00e9\u00e8", "n": None}
        run.state.pending_calls = [ToolCall("toolu_1", "find_table", {"party": 2}, "ub_k1")]
        run.state.results = {"ub_k1": ToolResult("toolu_1", "table 7", False, "executed")}
        run.save()

        loaded = store.load("run-messages")

        assert loaded.messages == MESSAGES
        assert comparable(loaded) == comparable(run.state)

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
        assert comparable(from_deltas) == comparable(from_snapshots) == comparable(deltas.state)

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
        assert comparable(store.load("run-rewrite")) == comparable(state)
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
