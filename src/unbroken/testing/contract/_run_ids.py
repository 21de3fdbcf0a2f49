"""The contract on run ids: every method refuses a bad one before touching anything."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from ...codec import EncodedSave, Encoder
from ...errors import EncryptionKeyMissing, InvalidRunId
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
    "ledger_page": lambda store, run_id: store.ledger_page(run_id),
    "read_raw_records": lambda store, run_id: store.read_raw_records(run_id),
    "iter_raw_records": lambda store, run_id: list(store.iter_raw_records(run_id)),
    "iter_load_pieces": lambda store, run_id: list(store.iter_load_pieces(run_id)),
    "read_packed": lambda store, run_id: store.read_packed(run_id),
    "decode": lambda store, run_id: store.decode(run_id),
    "history": lambda store, run_id: store.history(run_id),
    "exists": lambda store, run_id: store.exists(run_id),
    "head_of": lambda store, run_id: store.head_of(run_id),
    "records_since": lambda store, run_id: store.records_since(run_id),
    "records_in": lambda store, run_id: store.records_in(run_id, 0, 10),
    "newest_snapshot": lambda store, run_id: store.newest_snapshot(run_id),
    "queued": lambda store, run_id: store.queued(run_id),
    "submit": lambda store, run_id: store.submit("t", run_id),
    "park": lambda store, run_id: store.park(run_id, "holder", 60.0),
    "unpark": lambda store, run_id: store.unpark(run_id, "holder"),
    "ledger_stored": lambda store, run_id: store.ledger_stored(run_id),
    "key_missing": lambda store, run_id: store.key_missing(run_id, EncryptionKeyMissing("no keys")),
    "why_missing": lambda store, run_id: store.why_missing(run_id),
}
"""Every public ``Store`` method that takes a run id (a test below keeps the list whole)."""


class RunIdContract(ContractBase):
    """Run ids that could escape a directory or a key space raise ``InvalidRunId``."""

    @pytest.mark.parametrize("method", sorted(_RUN_ID_CALLS))
    @pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=["dotdot", "absolute", "empty", "nul", "too-long"])
    def test_an_invalid_run_id_raises_invalid_run_id(self, store: Store, method: str, run_id: str) -> None:
        with pytest.raises(InvalidRunId):
            _RUN_ID_CALLS[method](store, run_id)

    def test_every_door_that_takes_a_run_id_is_listed_above(self, store: Store) -> None:
        """The run id is checked once, at ``Store``'s public methods (never again below them):
        so each of them must be in ``_RUN_ID_CALLS``, and a new one cannot be forgotten."""
        doors = {
            name
            for name, member in inspect.getmembers(Store, inspect.isfunction)
            if not name.startswith("_") and "run_id" in inspect.signature(member).parameters
        }
        assert doors <= set(_RUN_ID_CALLS), sorted(doors - set(_RUN_ID_CALLS))
