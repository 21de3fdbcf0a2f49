"""Store work off the event loop: the one hand-off that ``Agent.arun`` and the integrations use.

The store's rules (``base.py``) are written once, synchronously. An async caller does not get
a second, hand-kept async copy of them (the psycopg lesson: two copies drift); it hands the
sync call to a thread. Each store has its own bounded pool of threads, ``Store.concurrency``
wide (a PostgreSQL store's ``pool_size``, a Redis store's ``pool_size``): more threads than
connections would only queue inside the driver's pool, and a pool shared across stores would
let a slow store stall a fast one.

Cancellation never splits a store call in two. A call already running in its thread cannot be
stopped half way, so ``off_loop`` waits for it to end before the ``CancelledError`` goes on:
what the caller does next (release the lease, resume) sees the save as either made or not, never
in flight. A call still queued (its thread not started) is dropped: nothing of it happened.

Imported lazily (asyncio and concurrent.futures cost ~35 ms at ``import unbroken``).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .base import Store

T = TypeVar("T")

__all__ = ["executor", "off_loop", "settle"]

_pools: weakref.WeakKeyDictionary[Store, tuple[int, ThreadPoolExecutor]] = weakref.WeakKeyDictionary()
_pools_lock = threading.Lock()


def executor(store: Store) -> ThreadPoolExecutor:
    """The store's own pool of threads (``store.concurrency`` of them, made on first use; a
    forked child makes its own). Its threads end when the store is garbage collected."""
    with _pools_lock:
        found = _pools.get(store)
        if found is not None and found[0] == os.getpid():
            return found[1]
        size = max(1, int(getattr(store, "concurrency", 1)))
        pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"unbroken-store-{type(store).__name__}")
        _pools[store] = (os.getpid(), pool)
        weakref.finalize(store, pool.shutdown, wait=False)
        return pool


async def settle(store: Store, call: Callable[[], T]) -> tuple[Future[T], bool]:
    """Run ``call()`` in one of the store's threads and wait until it has ended, through any
    cancellation of the awaiting task. Returns its future (done: a result, an exception, or
    cancelled if it never started) and whether the task was cancelled meanwhile; the caller
    raises ``CancelledError`` after acting on what the call did (``off_loop`` does just that)."""
    future = executor(store).submit(call)
    waiter = asyncio.wrap_future(future)
    waiter.add_done_callback(_retrieved)  # its error is read from ``future``, never lost to a log line
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(waiter)
        except asyncio.CancelledError:
            cancelled = True
            future.cancel()  # only a call not started yet can be dropped; a running one is awaited
        except BaseException:  # the call's own error: the caller reads it from ``future``
            pass
    return future, cancelled


def _retrieved(waiter: asyncio.Future[Any]) -> None:
    if not waiter.cancelled():
        waiter.exception()


async def off_loop(store: Store, function: Callable[..., T], /, *args: object) -> T:
    """``function(*args)`` in one of ``store``'s threads: what an async caller uses for any sync
    store work (a save, a load, a ledger claim), so the event loop never waits on the store.
    Returns its result or raises its error. Cancelled while it runs: the call is still waited
    for (a save is made or not, never left in flight), then ``CancelledError`` is raised."""
    context = contextvars.copy_context()  # as asyncio.to_thread: the call sees the caller's context
    future, cancelled = await settle(store, lambda: context.run(function, *args))
    if cancelled:
        raise asyncio.CancelledError
    return future.result()
