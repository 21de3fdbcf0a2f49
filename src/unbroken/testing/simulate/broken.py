"""Deliberately broken backends: each breaks one atomicity rule of ``stores/backend.py``, so a
test can show the simulator catches a backend that does (as it would catch yours)."""

from __future__ import annotations

from collections.abc import Callable

from ...stores.backend import Backend, RunHead, SealedEntry
from ...stores.base import Store
from .delegate import Delegating, view


class CasIgnoresExpected(Delegating):
    """A4 broken: ``swap_head`` writes whatever the head is (it never compares)."""

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        return self.inner.swap_head(run_id, self.inner.read_head(run_id), new)


class InsertAlwaysSucceeds(Delegating):
    """A5 broken: ``insert_entry`` overwrites an existing key and says it inserted."""

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        self.inner.put_entry(sealed, fence=fence)
        return None


class StaleHead(Delegating):
    """A lagging replica: ``read_head`` answers the head as it was one write earlier."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self._previous: dict[str, RunHead | None] = {}
        self._last: dict[str, RunHead | None] = {}

    def read_head(self, run_id: str) -> RunHead | None:
        head = self.inner.read_head(run_id)
        if head != self._last.get(run_id, head):
            self._previous[run_id] = self._last.get(run_id)
        self._last[run_id] = head
        return self._previous.get(run_id, head)


BROKEN: dict[str, Callable[[Store], Store]] = {
    "cas_ignores_expected": lambda store: view(store, CasIgnoresExpected),
    "insert_always_succeeds": lambda store: view(store, InsertAlwaysSucceeds),
    "stale_head": lambda store: view(store, StaleHead),
}
"""Each broken backend, by name: a function wrapping a real store's backend."""
