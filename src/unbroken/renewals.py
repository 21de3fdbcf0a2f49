"""One renewal thread per store: every lease this process holds through a store is kept alive
from that store's one thread, not from a thread per run (200 runs were 200 threads, each
waking on its own timer and contending for the GIL with the runs).

A lease joins with ``Renewals.add`` when its run starts (``leases.Heartbeat``) and leaves with
``remove`` when it ends. Each lease is renewed ``ttl / 3`` after its previous renewal ended, as
its own thread did: the thread sleeps until the earliest lease is due, renews every lease due,
and stops when it holds none (the next ``add`` starts it again). A renewal refused for good
(``LeaseLost``, ``StoreDataLost``: the guard remembers it, and the run's next check or save
raises it) drops that lease; any other error (the store briefly unreachable) leaves it to be
tried again at its next beat. ``remove`` returns once no renewal of that lease is in flight, so
a release that follows it is never overtaken by a renewal.

A forked child starts with no renewals: its parent's leases are not its own.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
import weakref

from .errors import LeaseLost, StoreDataLost
from .fencing import LeaseGuard
from .stores.base import Store

__all__ = ["Renewals", "renewals_of"]

_REMOVE_WAIT_S = 5.0
"""How long ``remove`` waits for a renewal of its lease in flight (a heartbeat thread's join did the same)."""


class Renewals:
    """The leases this process renews through one store, and the one thread renewing them."""

    def __init__(self, name: str = "unbroken-renewals") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._due: dict[LeaseGuard, float] = {}
        """Each lease held, and the ``time.monotonic()`` of its next renewal."""
        self._heap: list[tuple[float, int, LeaseGuard]] = []
        """(due, order, guard): the earliest first; an entry whose due is no longer ``_due``'s is stale."""
        self._order = itertools.count()
        self._renewing: LeaseGuard | None = None
        self._thread: threading.Thread | None = None
        self.renewed = 0
        """Renewals sent so far (for tests)."""

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)

    def add(self, guard: LeaseGuard) -> None:
        """Renew ``guard``'s lease every ``ttl / 3`` from now until ``remove``."""
        with self._cond:
            self._schedule(guard, time.monotonic() + guard.ttl / 3)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def remove(self, guard: LeaseGuard) -> None:
        """Stop renewing ``guard``'s lease; returns once no renewal of it is in flight (up to 5 s)."""
        deadline = time.monotonic() + _REMOVE_WAIT_S
        with self._cond:
            self._due.pop(guard, None)
            self._cond.notify_all()
            while self._renewing is guard and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)

    def _schedule(self, guard: LeaseGuard, at: float) -> None:
        self._due[guard] = at
        heapq.heappush(self._heap, (at, next(self._order), guard))

    def _next_due(self) -> LeaseGuard | None:
        """Wait (holding the condition) until a lease is due and return it; None once none is held."""
        while self._due:
            at, _, guard = self._heap[0]
            if self._due.get(guard) != at:
                heapq.heappop(self._heap)  # removed, or scheduled again since
                continue
            wait = at - time.monotonic()
            if wait <= 0:
                heapq.heappop(self._heap)
                return guard
            self._cond.wait(wait)
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                guard = self._next_due()
                if guard is None:
                    self._heap.clear()
                    self._thread = None  # (under the condition: the next add starts a new thread)
                    return
                self._renewing = guard
            keep = True
            try:
                guard.renew()
            except (LeaseLost, StoreDataLost):  # for good: the next check or save raises it
                keep = False
            except Exception:  # the store is briefly unreachable: try again at the next beat
                pass
            with self._cond:
                self.renewed += 1
                self._renewing = None
                if keep and guard in self._due:
                    self._schedule(guard, time.monotonic() + guard.ttl / 3)
                else:
                    self._due.pop(guard, None)
                self._cond.notify_all()


_lock = threading.Lock()
_by_store: weakref.WeakKeyDictionary[Store, Renewals] = weakref.WeakKeyDictionary()


def renewals_of(store: Store) -> Renewals:
    """The one ``Renewals`` of ``store`` in this process (made at its first lease)."""
    with _lock:
        renewals = _by_store.get(store)
        if renewals is None:
            renewals = _by_store[store] = Renewals()
        return renewals


def _forget_after_fork() -> None:
    global _lock, _by_store
    _lock = threading.Lock()
    _by_store = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_forget_after_fork)
