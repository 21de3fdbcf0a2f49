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
``corrupt_record``), so it runs unchanged on any backend. It is composed of one class per
topic (records, corruption, leases and fences, effect ledger, run ids), each in its own module.
"""

from __future__ import annotations

from ._corruption import CorruptionContract
from ._leases import LeasesContract
from ._ledger import LedgerContract
from ._records import RecordsContract
from ._run_ids import RunIdContract
from ._support import BAD_RUN_IDS, MESSAGES, RunWriter, ledger_entry


class StoreContract(RecordsContract, CorruptionContract, LeasesContract, LedgerContract, RunIdContract):
    """The behaviour every store must have. Subclass it, provide ``store``, implement ``corrupt_record``."""


__all__ = ["BAD_RUN_IDS", "MESSAGES", "RunWriter", "StoreContract", "ledger_entry"]
