"""Which thread calls a store: the proof that ``Agent.arun`` keeps store work off the event loop.

``watch(store)`` swaps the store's class, and its backend's, for subclasses whose every method
notes the calling thread (the rules of ``Store``, the primitives, a backend's own fast paths alike), so the test
holds for any store. A test sets ``loop_thread`` from inside its event loop and reads
``on_loop()``: the names of the store methods called on that thread (none, if the store's work
was handed off).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from unbroken.stores.base import Store


class StoreThreads:
    """The calls made to one store, with the thread of each."""

    def __init__(self) -> None:
        self.loop_thread: int | None = None
        self.calls: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self.running = 0
        """Calls in progress now (one store method calling another counts once per level)."""
        self.most_at_once = 0

    def on_loop(self) -> list[str]:
        """The store methods called on the event loop's thread."""
        return [name for name, thread in self.calls if thread == self.loop_thread]

    def enter(self, name: str) -> None:
        with self._lock:
            self.calls.append((name, threading.get_ident()))
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)

    def leave(self) -> None:
        with self._lock:
            self.running -= 1


def watch(store: Store) -> StoreThreads:
    """Note the thread of every call to ``store``'s methods, and to its backend's, from now on."""
    watcher = StoreThreads()
    for target in (store, store.backend):
        cls = type(target)
        wrapped: dict[str, Any] = {}
        for name in dir(cls):
            if name.startswith("__") or name in ("close",):
                continue
            static = inspect.getattr_static(cls, name)
            if isinstance(static, staticmethod | classmethod | property) or not inspect.isfunction(static):
                continue
            wrapped[name] = _noting(name, static, watcher)
        target.__class__ = type(f"Watched{cls.__name__}", (cls,), wrapped)
    return watcher


def _noting(name: str, method: Callable[..., Any], watcher: StoreThreads) -> Callable[..., Any]:
    @functools.wraps(method)
    def noted(self: object, *args: Any, **kwargs: Any) -> Any:
        watcher.enter(name)
        try:
            return method(self, *args, **kwargs)
        finally:
            watcher.leave()

    return noted


def arun_many(store: Store, runs: int) -> tuple[StoreThreads, list[str], list[int]]:
    """``runs`` runs at once through ``Agent.arun`` on ``store`` (a side-effecting call each, then
    an answer), watched: returns the watch, each run's status, and the charges made."""
    import asyncio

    from unbroken import Agent, ScriptedModel, tool

    threads = watch(store)
    charges: list[int] = []

    @tool(effect="side_effect")
    def charge(amount: int) -> str:
        charges.append(amount)
        return f"charged {amount}"

    def agent(amount: int) -> Agent:
        call = {"type": "tool_use", "id": f"c{amount}", "name": "charge", "input": {"amount": amount}}
        script: list[dict[str, Any]] = [
            {"content": [call], "stop_reason": "tool_use", "usage": {}},
            {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
        ]
        return Agent(ScriptedModel(script), [charge], store)

    async def main() -> list[str]:
        threads.loop_thread = threading.get_ident()
        results = await asyncio.gather(*(agent(n).arun("charge", run_id=f"run-{n}") for n in range(runs)))
        return [result.status for result in results]

    return threads, asyncio.run(main()), charges


class SaveGate:
    """Holds one save in ``write_record`` (in whichever thread makes it) until ``release`` is
    set: ``arm()``, then the next save sets ``entered`` and waits. ``saved`` is its seq once made."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.saved: int | None = None
        self.released_lease_after_save: bool | None = None

    def arm(self) -> None:
        self.armed.set()


def gate_saves(store: Store) -> SaveGate:
    """Swap ``store``'s backend's class for one whose ``write_record`` passes through a
    ``SaveGate`` (and ``store``'s class for one that notes when the lease is released)."""
    gate = SaveGate()
    cls, backend_cls = type(store), type(store.backend)

    def write_record(self: Any, save: Any, ledger: Any, *, expect_seq: int, fence: int | None) -> None:
        held = gate.armed.is_set() and not gate.entered.is_set()
        if held:
            gate.entered.set()
            assert gate.release.wait(10), "the gate was never released"
        backend_cls.write_record(self, save, ledger, expect_seq=expect_seq, fence=fence)
        if held:
            gate.saved = save.seq

    def release_lease(self: Store, lease: Any) -> None:
        if gate.entered.is_set() and gate.released_lease_after_save is None:
            gate.released_lease_after_save = gate.saved is not None
        cls.release_lease(self, lease)

    store.backend.__class__ = type(f"Gated{backend_cls.__name__}", (backend_cls,), {"write_record": write_record})
    store.__class__ = type(f"Gated{cls.__name__}", (cls,), {"release_lease": release_lease})
    return gate
