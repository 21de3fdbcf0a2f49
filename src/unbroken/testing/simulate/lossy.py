"""A store that loses what its declared durability lets it lose: an in-memory service that
writes to disk once a second (Redis with ``appendfsync everysec``: a restart of the service
loses the last second), can restart having lost everything (no persistence at all), and can
evict keys under memory pressure (when its ``maxmemory-policy`` is an ``allkeys-*`` one).

It declares ``durability="process_crash"``: a crash of the *agent's* process loses nothing, a
crash of the service does. The simulator plays its restarts (``lose`` actions) and reports what
they cost separately from the invariants broken without any loss.

It also tells its server settings the way Redis does (``server_settings``), and the world opens
it through the Redis store's own precondition check (``opened``: ``_redis_settings.
check_durability``, which calls ``check_eviction``). A store whose policy may evict is refused
there, so no side effect ever runs on it; an eviction (``evict`` actions) is therefore no loss a
checked store permits, and what it breaks counts as a failure: it can happen only when the
check is switched off.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol, runtime_checkable

from ...errors import InsufficientDurability
from ...stores._redis_settings import SAFE_POLICIES, ServerSettings, check_durability
from ...stores.backend import Durability
from ...stores.base import Store
from ...stores.memory import InMemoryBackend

LEVEL = "normal"
"""The durability the world asks of a store that declares its settings (``appendfsync
everysec`` gives it; the same level as ``?durability=normal`` on a Redis URL)."""


@runtime_checkable
class Forgetful(Protocol):
    """A store the simulator can make lose data (as its durability allows)."""

    def sync(self) -> None:
        """What is written so far survives a restart of the service from now on."""

    def restart(self, *, everything: bool) -> None:
        """The service restarts: back to the last ``sync`` (or empty, with ``everything``)."""

    def evict(self, index: int) -> str | None:
        """Drop one key (picked by ``index``) as memory pressure would, if the server's policy
        evicts; what was dropped."""


@runtime_checkable
class DeclaresSettings(Protocol):
    """A store whose server tells what it does to keep data (as Redis answers ``CONFIG GET``)."""

    def server_settings(self) -> ServerSettings:
        """``appendonly``, ``appendfsync`` and ``maxmemory-policy``, as the server reports them."""


def opened(store: Store) -> str | None:
    """Why the world must not run on ``store`` (the message of ``InsufficientDurability``), or
    None: a store that declares its server settings is checked as ``RedisStore`` checks its
    server at open (``_redis_settings.check_durability`` at ``LEVEL``); others pass."""
    if not isinstance(store, DeclaresSettings):
        return None
    try:
        check_durability(LEVEL, store.server_settings(), store.url)
    except InsufficientDurability as exc:
        return str(exc)
    return None


class ForgetfulBackend(InMemoryBackend):
    """``memory://`` with the losses of a cache-like server (see the module docstring);
    ``maxmemory_policy`` ``allkeys-lru`` makes one that evicts."""

    durability: Durability = "process_crash"

    def __init__(self, url: str = "forgetful://", *, maxmemory_policy: str = "noeviction") -> None:
        super().__init__(url)
        self._synced: tuple[Any, Any] = ({}, {})
        self.maxmemory_policy = maxmemory_policy

    def server_settings(self) -> ServerSettings:
        return ServerSettings("yes", "everysec", self.maxmemory_policy)

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
        if self.maxmemory_policy in SAFE_POLICIES:
            return None  # such a server never evicts a key without a TTL (unbroken sets none)
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


class ForgetfulStore(Store):
    """The store over a ``ForgetfulBackend``: ``Forgetful`` and ``DeclaresSettings`` as it is."""

    backend: ForgetfulBackend

    def __init__(self, url: str = "forgetful://", *, maxmemory_policy: str = "noeviction") -> None:
        super().__init__(ForgetfulBackend(url, maxmemory_policy=maxmemory_policy))

    def server_settings(self) -> ServerSettings:
        return self.backend.server_settings()

    def sync(self) -> None:
        self.backend.sync()

    def restart(self, *, everything: bool) -> None:
        self.backend.restart(everything=everything)

    def evict(self, index: int) -> str | None:
        return self.backend.evict(index)


def evicting() -> ForgetfulStore:
    """A forgetful store whose server evicts any key under memory pressure (``allkeys-lru``)."""
    return ForgetfulStore("forgetful://evicting", maxmemory_policy="allkeys-lru")
