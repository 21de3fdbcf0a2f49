"""The contract on run ids: every method refuses a bad one before touching anything."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ...codec import EncodedSave, Encoder
from ...errors import InvalidRunId
from ...state import RunState
from ...stores.base import Store
from ._base import ContractBase
from ._support import BAD_RUN_IDS, LONG_TTL, ledger_entry


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


class RunIdContract(ContractBase):
    """Run ids that could escape a directory or a key space raise ``InvalidRunId``."""

    @pytest.mark.parametrize("method", sorted(_RUN_ID_CALLS))
    @pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=["dotdot", "absolute", "empty", "nul", "too-long"])
    def test_an_invalid_run_id_raises_invalid_run_id(self, store: Store, method: str, run_id: str) -> None:
        with pytest.raises(InvalidRunId):
            _RUN_ID_CALLS[method](store, run_id)
