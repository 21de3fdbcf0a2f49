"""Read a run's records in a background thread while the loader parses them.

A long resume spends its time in two kinds of work: fetching the records (SQLite's
``sqlite3_step``, a network read, a file read: the GIL is released while they wait or copy)
and parsing and folding them (orjson and Python: the GIL is held). Done one after the other,
the wall time is their sum; with the fetch in a thread it is about the larger of the two.

``Prefetch`` runs any iterator in one daemon thread and hands its items over in batches
through a bounded queue, so memory stays bounded (``depth`` batches of ``batch`` items ahead of
the reader). The items, their order and the exceptions are exactly the source's: an error in
the thread is raised again from ``next()`` in the reader, after the items that came before it.
The thread never outlives its reader: ``close()`` (also called on exhaustion, on an error and
by ``with``) tells it to stop, makes room in the queue and joins it; the source iterator is
closed in the thread that ran it (a store's generator may hold a lock or a transaction that
belongs to that thread).

``Store.decode`` uses it for a long run when ``Store.prefetch_from`` is set; it is off by default
(measured, it did not pay on this project's stores: see ``Store.prefetch_from``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Generator, Iterable, Iterator
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Prefetch"]

_DONE = object()


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetch(Generic[T]):
    """Iterate ``source`` in a background thread; yield its items here, in order."""

    def __init__(
        self, source: Iterable[T], *, batch: int = 256, depth: int = 4, name: str = "unbroken-prefetch"
    ) -> None:
        if batch < 1 or depth < 1:
            raise ValueError("batch and depth must be at least 1")
        self._source = source
        self._batch = batch
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._items = self._read()
        self._thread = threading.Thread(target=self._fill, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the thread

    def _put(self, item: object) -> bool:
        """Queue ``item`` unless the reader has closed; False once it has."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        iterator: Iterator[T] | None = None
        batch: list[T] = []
        try:
            iterator = iter(self._source)
            size, stop = self._batch, self._stop
            append = batch.append
            for item in iterator:
                append(item)
                if len(batch) >= size:
                    if not self._put(batch):
                        return
                    batch = []
                    append = batch.append
                    if stop.is_set():
                        return
            if (not batch or self._put(batch)) and not stop.is_set():
                self._put(_DONE)
        except BaseException as exc:  # handed to the reader after the items before it, raised there
            if not batch or self._put(batch):
                self._put(_Failure(exc))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                try:
                    close()
                except BaseException as exc:  # raised in the reader if it is still reading
                    self._put(_Failure(exc))

    # ------------------------------------------------------------------ the reader

    def _read(self) -> Generator[T, None, None]:
        # A generator (resumed in C for each item of a batch) rather than a __next__ method:
        # ~3 ms less at 20,000 records. Closing it closes the reader.
        get = self._queue.get
        try:
            while True:
                got = get()
                if type(got) is list:
                    yield from got
                    continue
                self.close()
                if isinstance(got, _Failure):
                    raise got.error
                return
        finally:
            self.close()

    def __iter__(self) -> Iterator[T]:
        return self._items

    def __next__(self) -> T:
        return next(self._items)

    def close(self) -> None:
        """Stop the thread and wait for it (idempotent). Items not read yet are dropped."""
        self._stop.set()
        if not getattr(self._items, "gi_running", False):  # (running: the reader calls this on its way out)
            self._items.close()
        thread = self._thread
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):  # make room, in case the thread is blocked putting a batch
                self._queue.get(timeout=0.05)
        thread.join()

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
