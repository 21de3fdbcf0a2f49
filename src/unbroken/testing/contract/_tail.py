"""The contract on tail reads: the newest snapshot and the records after it (issue 16).

A compacted run resumes from its tail (``unbroken.window.load_window``): the store must find its
newest full snapshot (``snapshot_seq``) and hand back exactly the records after a position
(``records_after``), so that the tail folds to the same state as the whole run."""

from __future__ import annotations

from typing import Any

import pytest

from ... import window
from ...codec import Encoder, encode_full, fold_fields, is_snapshot, loads
from ...stores.base import Store
from ._base import ContractBase
from ._support import RunWriter, comparable


def _snapshot_run(store: Store, run_id: str) -> RunWriter:
    """Ten saves with periodic snapshots (every 4th), a forced one off that grid, then deltas."""
    run = RunWriter(store, run_id, snapshot_every=4)
    for step in range(1, 11):
        run.state.messages.append({"role": "user", "content": f"m{step}"})
        run.state.turns = step
        run.state.business_state[f"k{step % 3}"] = step
        run.save(force_snapshot=step == 7)
    return run


def _fold_fields(bodies: list[Any]) -> dict[str, Any]:
    fields: dict[str, Any] | None = None
    for body in bodies:
        fields = fold_fields(fields, body)
    return fields or {}


class TailContract(ContractBase):
    """``snapshot_seq`` finds the newest full snapshot; ``records_after`` returns exactly the records
    past a position; a compacted run's tail folds to the same state as its whole history."""

    def test_snapshot_seq_is_the_newest_snapshot_among_periodic_and_forced_ones(self, store: Store) -> None:
        _snapshot_run(store, "run-snapshots")
        flags = [info.snapshot for info in store.history("run-snapshots")]
        newest = max(seq for seq, snapshot in enumerate(flags, start=1) if snapshot)
        assert newest == 7 and not flags[-1] and flags[0]  # the run is what the test needs

        assert store.newest_snapshot("run-snapshots") == newest

    def test_snapshot_seq_after_a_rewrite_is_the_rewrite_record_not_an_older_one(self, store: Store) -> None:
        run = _snapshot_run(store, "run-rewritten")
        state = store.load("run-rewritten")
        state.save_seq = 11
        store.rewrite("run-rewritten", [encode_full(state, "compacted")], expect_seq=10)
        run.encoder = Encoder(snapshot_every=50)
        run.encoder.prime(state)
        run.state = state
        run.turn(12)
        run.turn(13)
        assert [info.snapshot for info in store.history("run-rewritten")] == [True, False, False]

        assert store.newest_snapshot("run-rewritten") == 11

    def test_snapshot_seq_is_zero_for_an_unknown_run(self, store: Store) -> None:
        assert store.newest_snapshot("run-never-saved") == 0

    def test_records_after_returns_exactly_the_records_past_a_seq_ascending_and_verbatim(self, store: Store) -> None:
        run = RunWriter(store, "run-after", snapshot_every=8)
        written = [run.turn(step) for step in range(1, 41)]
        expected = {s.seq: (s.body, s.checksum) for s in written}

        for after in (0, 1, 17, 39, 40, 55):
            records = store.records_since("run-after", after)
            assert [r.seq for r in records] == list(range(after + 1, 41)), after
            assert all((_text(r.body), r.checksum) == expected[r.seq] for r in records)
        assert store.records_since("run-never-saved", 0) == []

    def test_newest_snapshot_and_the_records_after_it_fold_to_the_state_of_the_whole_load(self, store: Store) -> None:
        run = _snapshot_run(store, "run-fold")
        run.turn(11)
        run.turn(12)

        tail = store.records_since("run-fold", store.newest_snapshot("run-fold") - 1)

        bodies = [loads(_text(record.body)) for record in tail]
        assert is_snapshot(bodies[0]) and len(bodies) < len(store.read_records("run-fold"))
        whole = store.load("run-fold").small_fields()
        assert _fold_fields(bodies) == whole

    def test_a_compacted_run_loads_from_its_tail_to_the_same_state_as_the_whole_load(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(window, "FIRST_SPAN", 4)  # a short run takes the tail path, widening once
        run = RunWriter(store, "run-compacted", snapshot_every=6)
        for step in range(1, 31):
            if step == 20:  # compaction: the summary covers the first 12 messages
                run.state.summary, run.state.summary_upto = "summary of steps 1-12", 12
            run.turn(step)

        tail = window.load_window(store, "run-compacted")

        whole = store.load("run-compacted")
        assert 0 < tail.message_base <= 12 and tail.records[0]["seq"] > 1
        assert tail.state.messages[tail.message_base :] == whole.messages[tail.message_base :]
        assert tail.state.messages[: tail.message_base] == [None] * tail.message_base
        assert comparable(tail.state)[0] == comparable(whole)[0]
        assert tail.last_seq == 30


def _text(body: str | bytes) -> str:
    return body.decode() if isinstance(body, bytes) else body
