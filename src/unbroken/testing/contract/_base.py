"""The two things a backend provides to the contract: a ``store`` fixture and ``corrupt_record``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ...stores.base import Store


class ContractBase:
    """What every topic of the contract relies on; ``StoreContract`` composes the topics."""

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
