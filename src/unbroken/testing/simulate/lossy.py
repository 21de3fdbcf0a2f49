"""A store that loses what its declared durability lets it lose: an in-memory service that
writes to disk once a second (Redis with ``appendfsync everysec``: a restart of the service
loses the last second), can restart having lost everything (no persistence at all), and can
evict keys under memory pressure (``maxmemory-policy allkeys-*``).

It declares ``durability="process_crash"``: a crash of the *agent's* process loses nothing, a
crash of the service does. The simulator plays its losses (``lose``, ``evict`` actions) and
reports what they cost separately from the invariants broken without any loss.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol, runtime_checkable

from ...stores.memory import InMemoryStore


@runtime_checkable
class Forgetful(Protocol):
    """A store the simulator can make lose data (as its durability allows)."""

    def sync(self) -> None:
        """What is written so far survives a restart of the service from now on."""

    def restart(self, *, everything: bool) -> None:
        """The service restarts: back to the last ``sync`` (or empty, with ``everything``)."""

    def evict(self, index: int) -> str | None:
        """Drop one key (picked by ``index``) as memory pressure would; what was dropped."""


class ForgetfulStore(InMemoryStore):
    """``memory://`` with the losses of a cache-like server (see the module docstring)."""

    durability = "process_crash"  # type: ignore[assignment]  # the reference store says "memory"

    def __init__(self, url: str = "forgetful://") -> None:
        super().__init__(url)
        self._synced: tuple[Any, Any] = ({}, {})

    def sync(self) -> None:
        with self._lock:
            self._synced = (copy.deepcopy(self._runs), copy.deepcopy(self._queue))

    def restart(self, *, everything: bool) -> None:
        with self._lock:
            if everything:
                self._runs, self._queue = {}, {}
            else:
                self._runs, self._queue = copy.deepcopy(self._synced[0]), copy.deepcopy(self._synced[1])

    def evict(self, index: int) -> str | None:
        with self._lock:
            keys: list[tuple[str, str, Any]] = []
            for run_id, run in sorted(self._runs.items()):
                keys += [(run_id, "ledger", key) for key in sorted(run.ledger)]
                keys += [(run_id, "record", record.seq) for record in run.records]
                keys.append((run_id, "head", None))
            if not keys:
                return None
            run_id, kind, key = keys[index % len(keys)]
            run = self._runs[run_id]
            if kind == "ledger":
                del run.ledger[key]
            elif kind == "record":
                run.records = [record for record in run.records if record.seq != key]
            else:
                del self._runs[run_id]
            return f"{kind} {key} of {run_id}"
