"""What a backend provides to the contract: a ``store`` fixture and three ways to damage it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import AnyStr

import pytest

from ...stores.base import Store


class ContractBase:
    """What every topic of the contract relies on; ``StoreContract`` composes the topics.

    The damage hooks reach into the backend's own storage (a second connection, the files, the
    keys), as a bad disk, a torn write or a person with an editor would."""

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

    def delete_record(self, store: Store, run_id: str, seq: int) -> None:
        """Remove save record ``seq`` of ``run_id`` from the backend's storage and nothing else
        (the run's head still says how far it was saved), as a lost file or a bad restore would."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement delete_record(store, run_id, seq): remove that one save "
            "record from the backend's storage behind the store's back, leaving the run's head as it is"
        )

    def edit_entry(self, store: Store, run_id: str, key: str) -> None:
        """Change the stored effect-ledger entry ``key`` of ``run_id`` and keep its checksum: replace
        ``EDITED_FROM`` by ``EDITED_TO`` in its stored text (the suite puts that text in its result)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement edit_entry(store, run_id, key): in the stored ledger entry, "
            "replace StoreContract.EDITED_FROM by StoreContract.EDITED_TO without updating its checksum"
        )

    EDITED_FROM = "charged 10 EUR"
    EDITED_TO = "charged 99 EUR"

    @staticmethod
    def tamper(body: AnyStr) -> AnyStr:
        """``body`` with one character (one byte of a bytes body: a sealed record kept raw)
        changed (the checksum no longer matches)."""
        middle = len(body) // 2
        if isinstance(body, bytes):
            return body[:middle] + bytes([body[middle] ^ 1]) + body[middle + 1 :]
        replacement = "0" if body[middle] != "0" else "1"
        return body[:middle] + replacement + body[middle + 1 :]
