"""The contract on damage: a changed record is detected, and recovery stops just before it."""

from __future__ import annotations

import pytest

from ...errors import CorruptCheckpoint
from ...stores.base import Store
from ._base import ContractBase
from ._support import RunWriter, comparable


class CorruptionContract(ContractBase):
    """Damage is reported, never loaded; ``load(recover=True)`` returns the last intact save point."""

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
        at_two = comparable(store.load("run-recover"))
        run.turn(3)
        run.turn(4)
        self.corrupt_record(store, "run-recover", 3)

        recovered = store.load("run-recover", recover=True)

        assert recovered.save_seq == 2
        assert comparable(recovered) == at_two
