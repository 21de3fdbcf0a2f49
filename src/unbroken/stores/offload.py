"""Store work off the event loop: the one hand-off that ``Agent.arun`` and the integrations use.

The store's rules (``base.py``) are written once, synchronously. An async caller does not get
a second, hand-kept async copy of them (the psycopg lesson: two copies drift); it hands the
sync call to a thread. Each store has its own bounded pool of threads, ``Store.concurrency``
wide (a PostgreSQL store's ``pool_size``, a Redis store's ``pool_size``): more threads than
connections would only queue inside the driver's pool, and a pool shared across stores would
let a slow store stall a fast one.

The hand-off is lean because 200 runs in one process make thousands of them a second, and the
event loop pays for each (issue 24): a call ends by putting itself in its loop's *inbox*, and
only the call that finds the inbox empty wakes the loop (one ``call_soon_threadsafe``, one
self-pipe write), which then settles every call gathered meanwhile in one callback. The loop
side is one asyncio future per call: no ``concurrent.futures`` future wrapped, chained and
shielded (50 callers, side by side: 28-33 -> 12-17 us of CPU a hand-off, 21-25 -> 7-10 us
of it on the loop's thread; ``python benchmarks/bench_async.py --hops``).

Cancellation never splits a store call in two. A call already running in its thread cannot be
stopped half way, so ``off_loop`` waits for it to end before the ``CancelledError`` goes on:
what the caller does next (release the lease, resume) sees the save as either made or not, never
in flight. A call still queued (its thread not started) is dropped: nothing of it happened.

A store thread never waits for its own pool. Hooks run in the store thread that drives the run
(``docs/hooks.md``); a hook that reaches async code which hands work to the same store (say
``asyncio.run`` of an integration's async method) would wait for a thread of a pool whose only
thread is itself: such a call runs in place, in the thread that asked.

Imported lazily (asyncio and concurrent.futures cost ~35 ms at ``import unbroken``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from .base import Store

T = TypeVar("T")

__all__ = ["StoreCall", "executor", "off_loop", "settle"]

_pools: weakref.WeakKeyDictionary[Store, tuple[int, ThreadPoolExecutor]] = weakref.WeakKeyDictionary()
_pools_lock = threading.Lock()
_inside = threading.local()  # in a store thread: ``pool`` is the pool it belongs to


def executor(store: Store) -> ThreadPoolExecutor:
    """The store's own pool of threads (``store.concurrency`` of them, made on first use; a
    forked child makes its own). Its threads end when the store is garbage collected."""
    with _pools_lock:
        found = _pools.get(store)
        if found is not None and found[0] == os.getpid():
            return found[1]
        size = max(1, int(getattr(store, "concurrency", 1)))
        marks: list[ThreadPoolExecutor] = []
        pool = ThreadPoolExecutor(
            max_workers=size,
            thread_name_prefix=f"unbroken-store-{type(store).__name__}",
            initializer=_belongs_to,
            initargs=(marks,),
        )
        marks.append(pool)
        _pools[store] = (os.getpid(), pool)
        weakref.finalize(store, pool.shutdown, wait=False)
        return pool


def _belongs_to(marks: list[ThreadPoolExecutor]) -> None:
    _inside.pool = marks[0]


class StoreCall(Generic[T]):
    """One call handed to a store thread: queued, running, then ended (``result``) or dropped
    before it started (``cancelled``). Its state moves under ``_lock``; ``delivered`` and
    ``waiter`` are touched on the event loop's thread only."""

    __slots__ = ("delivered", "error", "function", "state", "value", "waiter")

    def __init__(self, function: Callable[[], T]) -> None:
        self.function = function
        self.state = "queued"
        self.value: T | None = None
        self.error: BaseException | None = None
        self.delivered = False
        self.waiter: asyncio.Future[None] | None = None

    def run(self) -> None:
        with _lock:
            if self.state != "queued":
                return  # dropped while queued: nothing of it happens
            self.state = "running"
        try:
            self.value = self.function()
        except BaseException as exc:  # handed to the caller, raised there
            self.error = exc
        with _lock:
            self.state = "ended"

    def drop(self) -> bool:
        """Drop the call if no thread has started it; False when it runs or ran."""
        with _lock:
            if self.state != "queued":
                return False
            self.state = "dropped"
            return True

    def cancelled(self) -> bool:
        """Dropped before any of it ran."""
        return self.state == "dropped"

    def result(self) -> T:
        """What the call returned; raises what it raised."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]

    def deliver(self) -> None:
        self.delivered = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


_lock = threading.Lock()  # a call's state: a few instructions under it, never a store call


class _Inbox:
    """The calls ended for one event loop, settled on it in batches: only the call that finds
    the inbox empty wakes the loop. It holds its loop weakly (``_inboxes`` maps the loop to it:
    a strong reference would keep every loop ``asyncio.run`` ever made alive)."""

    __slots__ = ("calls", "loop", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.calls: list[StoreCall[Any]] = []
        self.scheduled = False

    def post(self, call: StoreCall[Any]) -> None:
        with _lock:
            self.calls.append(call)
            if self.scheduled:
                return
            self.scheduled = True
        loop = self.loop()
        if loop is None:
            return  # the loop is gone: nobody waits for the call
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for the call
            loop.call_soon_threadsafe(self.drain)

    def drain(self) -> None:
        with _lock:
            calls, self.calls = self.calls, []
            self.scheduled = False
        for call in calls:
            call.deliver()


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()


def _inbox(loop: asyncio.AbstractEventLoop) -> _Inbox:
    inbox = _inboxes.get(loop)
    if inbox is None:
        inbox = _Inbox(loop)
        with contextlib.suppress(TypeError):  # a loop that takes no weak reference: one inbox per call
            _inboxes[loop] = inbox
    return inbox


def _ran_then_posted(call: StoreCall[Any], inbox: _Inbox) -> None:
    call.run()
    if call.state == "ended":
        inbox.post(call)


async def settle(store: Store, call: Callable[[], T]) -> tuple[StoreCall[T], bool]:
    """Run ``call()`` in one of the store's threads and wait until it has ended, through any
    cancellation of the awaiting task. Returns the ``StoreCall`` (ended: a result or an
    exception; or cancelled if it never started) and whether the task was cancelled meanwhile;
    the caller raises ``CancelledError`` after acting on what the call did (``off_loop`` does
    just that). Asked from one of the store's own threads, it runs in place (see above)."""
    pool = executor(store)
    handed: StoreCall[T] = StoreCall(call)
    if getattr(_inside, "pool", None) is pool:
        handed.run()  # a store thread waiting for its own pool could wait for itself forever
        return handed, False
    loop = asyncio.get_running_loop()
    pool.submit(_ran_then_posted, handed, _inbox(loop))
    cancelled = False
    while not handed.delivered:
        handed.waiter = loop.create_future()
        try:
            await handed.waiter
        except asyncio.CancelledError:
            cancelled = True
            if handed.drop():  # only a call not started yet can be dropped; a running one is awaited
                break
    return handed, cancelled


async def off_loop(store: Store, function: Callable[..., T], /, *args: object) -> T:
    """``function(*args)`` in one of ``store``'s threads: what an async caller uses for any sync
    store work (a save, a load, a ledger claim), so the event loop never waits on the store.
    Returns its result or raises its error. Cancelled while it runs: the call is still waited
    for (a save is made or not, never left in flight), then ``CancelledError`` is raised."""
    context = contextvars.copy_context()  # as asyncio.to_thread: the call sees the caller's context
    handed, cancelled = await settle(store, lambda: context.run(function, *args))
    if cancelled:
        raise asyncio.CancelledError
    return handed.result()
