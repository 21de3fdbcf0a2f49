"""A user's backend, as ``unbroken simulate --backend tests/sim/broken_backend.py:make`` loads it:
an in-memory store whose insert-if-absent always says it inserted (A5 broken)."""

from __future__ import annotations

from unbroken.stores.base import Store
from unbroken.stores.memory import InMemoryBackend, InMemoryStore
from unbroken.testing.simulate.broken import InsertAlwaysSucceeds


def make() -> Store:
    return Store(InsertAlwaysSucceeds(InMemoryBackend()))


def correct() -> Store:
    return InMemoryStore()
