"""The store contract: the behaviour every ``Store`` backend must have, as a pytest suite.

A backend author subclasses ``StoreContract``, provides a ``store`` fixture that yields a fresh,
empty store, and implements three damage hooks, each reaching into the backend's own storage
behind the store's back: ``corrupt_record`` (change a record's body, keep its checksum),
``delete_record`` (lose one record, keep the run's head) and ``edit_entry`` (change a ledger
entry, keep its checksum)::

    import pytest
    from unbroken.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(tmp_path)
            yield store
            store.close()

        def corrupt_record(self, store, run_id, seq): ...  # body=StoreContract.tamper(body)
        def delete_record(self, store, run_id, seq): ...
        def edit_entry(self, store, run_id, key): ...      # EDITED_FROM -> EDITED_TO in its text

A store whose durability is not ``memory`` is reopened with ``open_store(store.url)`` to check
that acknowledged writes are there for a second store; override ``reopen(store)`` if your URL
cannot be opened that way.

Every test states one behaviour in its name. The suite uses only the public ``Store`` API and
the backend primitives (``read_head``, ``swap_head``, ``records_after``, ``records_between``,
``snapshot_seq``, ``summaries_page``, ``list_entries``), so it runs unchanged on any backend. It
is composed of one class per topic (records, tail reads, paged reads, atomicity rules A1-A7,
damage, leases and fences, lost data, effect ledger, submit and claim, run ids), each in its own module.
"""

from __future__ import annotations

from ._atomicity import AtomicityContract
from ._claims import ClaimContract
from ._corruption import CorruptionContract
from ._data_lost import DataLostContract
from ._leases import LeasesContract
from ._ledger import LedgerContract
from ._paging import PagingContract
from ._records import RecordsContract
from ._run_ids import RunIdContract
from ._support import BAD_RUN_IDS, MESSAGES, RunWriter, ledger_entry
from ._tail import TailContract


class StoreContract(
    RecordsContract,
    TailContract,
    PagingContract,
    AtomicityContract,
    CorruptionContract,
    LeasesContract,
    DataLostContract,
    LedgerContract,
    ClaimContract,
    RunIdContract,
):
    """The behaviour every store must have. Subclass it, provide ``store`` and the damage hooks."""


__all__ = ["BAD_RUN_IDS", "MESSAGES", "RunWriter", "StoreContract", "ledger_entry"]
