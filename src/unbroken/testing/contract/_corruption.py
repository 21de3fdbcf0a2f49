"""The contract on damage: a changed, lost or edited record or ledger entry is detected as
``CorruptCheckpoint``, never loaded and never repaired (nothing is deleted)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import pytest

from ...errors import CorruptCheckpoint
from ...state import ToolResult
from ...stores.base import Store
from ._base import ContractBase
from ._support import RunWriter, comparable, ledger_entry

T = TypeVar("T")


class CorruptionContract(ContractBase):
    """Damage is reported, never loaded; ``load(recover=True)`` returns the last intact save point."""

    def _five_saves(self, store: Store, run_id: str) -> RunWriter:
        run = RunWriter(store, run_id)
        for step in range(1, 6):
            run.turn(step)
        return run

    def _assert_load_stops_at(self, store: Store, run_id: str, last_good: int) -> None:
        """``load`` raises ``CorruptCheckpoint`` naming ``last_good`` and leaves every record as it was."""
        before = store.records_since(run_id, 0)

        with pytest.raises(CorruptCheckpoint) as caught:
            store.load(run_id)

        assert caught.value.last_good_seq == last_good
        assert store.records_since(run_id, 0) == before

    def test_a_tampered_last_record_raises_corrupt_checkpoint_on_load(self, store: Store) -> None:
        run = RunWriter(store, "run-torn")
        for step in range(1, 4):
            run.turn(step)
        self.corrupt_record(store, "run-torn", 3)

        with pytest.raises(CorruptCheckpoint) as caught:
            store.load("run-torn")

        assert caught.value.last_good_seq == 2

    def test_a_record_copied_from_another_run_at_the_same_place_is_refused(self, store: Store) -> None:
        # Two runs saved alike; run b's save 3 is stored with run a's save 3 (body and checksum),
        # as a store bug or a hand edit would copy it: a delta at the same message position,
        # which the fold alone cannot tell from b's own. Each record's checksum is bound to its run.
        from ...stores.encrypted import EncryptedBackend  # (pyca is imported by encrypted stores only)

        if isinstance(store.backend, EncryptedBackend):
            pytest.skip("a sealed record is bound to its run by its associated data (tests/security)")
        runs = [RunWriter(store, run_id, task="same task") for run_id in ("run-copy-a", "run-copy-b")]
        for step in (1, 2):
            for run in runs:
                run.turn(step)
        copied = runs[0].turn(3)
        target = runs[1]
        target.state.messages.append({"role": "assistant", "content": [{"type": "text", "text": "step 3"}]})
        target.state.turns += 1
        target.state.tokens_used += 30
        target.state.business_state["k0"] = {"step": 3, "items": [0, 1, 2]}
        target.state.usage = {"input_tokens": 3, "output_tokens": 6}
        own = target.encode("turn 3")
        assert own.body == copied.body  # the same bytes, in another run
        store.append(replace(own, body=copied.body, checksum=copied.checksum), expect_seq=2)

        self._assert_load_stops_at(store, "run-copy-b", 2)
        with pytest.raises(CorruptCheckpoint, match=r"save record 3 of run 'run-copy-b' is damaged: .*another run"):
            store.load("run-copy-b")
        assert store.load("run-copy-a").save_seq == 3

    def test_a_damaged_middle_record_raises_corrupt_checkpoint_and_nothing_is_deleted(self, store: Store) -> None:
        self._five_saves(store, "run-damaged-middle")
        self.corrupt_record(store, "run-damaged-middle", 3)

        self._assert_load_stops_at(store, "run-damaged-middle", 2)

    def test_a_deleted_middle_record_raises_corrupt_checkpoint_and_nothing_is_deleted(self, store: Store) -> None:
        self._five_saves(store, "run-lost-middle")
        self.delete_record(store, "run-lost-middle", 3)

        self._assert_load_stops_at(store, "run-lost-middle", 2)

    def test_a_save_that_lands_while_a_run_is_read_is_not_taken_for_a_lost_tail(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Another process saves the run while this one loads it: wherever that save lands
        between the load's reads (of the head, of the records), the load is not damage."""
        run = self._five_saves(store, "run-racing")
        read_head, iter_pieces = store.backend.read_head, store.iter_load_pieces
        step = 5

        def saving_first(read: Callable[[str], T]) -> Callable[[str], T]:
            saving = False

            def racing(run_id: str) -> T:
                nonlocal step, saving
                if not saving:  # (a store's own append may read the head too)
                    saving = True
                    step += 1
                    run.turn(step)  # the other writer's save, landing right before this read
                return read(run_id)

            return racing

        for patched in ("read_head", "iter_load_pieces"):
            where = store.backend if patched == "read_head" else store  # a primitive, or the loader's read
            monkeypatch.setattr(where, patched, saving_first(read_head if patched == "read_head" else iter_pieces))
            state = store.load("run-racing")
            assert 5 <= state.save_seq <= step
            monkeypatch.undo()

    def test_a_missing_tail_record_is_detected_against_the_head(self, store: Store) -> None:
        self._five_saves(store, "run-lost-tail")
        self.delete_record(store, "run-lost-tail", 5)

        self._assert_load_stops_at(store, "run-lost-tail", 4)

    def test_a_run_whose_records_are_all_lost_is_corrupt_not_missing(self, store: Store) -> None:
        run = RunWriter(store, "run-lost-all")
        run.turn(1)
        run.turn(2)
        self.delete_record(store, "run-lost-all", 1)
        self.delete_record(store, "run-lost-all", 2)

        with pytest.raises(CorruptCheckpoint):
            store.load("run-lost-all")

        assert store.exists("run-lost-all")

    def test_history_of_a_damaged_run_lists_the_save_points_before_the_damage(self, store: Store) -> None:
        self._five_saves(store, "run-damaged-history")
        self.delete_record(store, "run-damaged-history", 4)

        assert [info.seq for info in store.history("run-damaged-history")] == [1, 2, 3]

    def test_load_with_recover_returns_the_last_intact_save_point(self, store: Store) -> None:
        run = RunWriter(store, "run-recover")
        run.turn(1)
        run.turn(2)
        at_two = comparable(store.load("run-recover"))
        run.turn(3)
        run.turn(4)
        self.corrupt_record(store, "run-recover", 3)

        recovered = store.load("run-recover", recover=True)

        assert recovered.save_seq == 2
        assert comparable(recovered) == at_two

    def _edited_entry_key(self, store: Store, run_id: str) -> str:
        result = ToolResult("call_1", self.EDITED_FROM, False)
        entry = ledger_entry(run_id, status="succeeded", result=result)
        RunWriter(store, run_id).save(ledger=[entry])
        self.edit_entry(store, run_id, entry.key)
        return entry.key

    def test_an_edited_ledger_entry_raises_corrupt_checkpoint_on_get_and_list(self, store: Store) -> None:
        key = self._edited_entry_key(store, "run-edited-entry")

        with pytest.raises(CorruptCheckpoint, match="checksum"):
            store.ledger_get("run-edited-entry", key)
        with pytest.raises(CorruptCheckpoint, match="checksum"):
            store.ledger_list("run-edited-entry")

        (kept,) = store.backend.list_entries("run-edited-entry")  # nothing deleted: the edit is still there
        assert kept.entry.result is not None and self.EDITED_TO in str(kept.entry.result.content)

    def test_an_edited_ledger_entry_is_never_handed_back_by_a_claim(self, store: Store) -> None:
        key = self._edited_entry_key(store, "run-edited-claim")
        again = ledger_entry("run-edited-claim")
        assert again.key == key

        with pytest.raises(CorruptCheckpoint, match="checksum"):
            store.ledger_claim(again)
