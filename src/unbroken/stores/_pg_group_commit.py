"""Group commit: the saves that threads of one process make at the same moment share one commit.

A save joins a queue. If fewer than ``width`` batches are being sent (the store's connections),
the saving thread becomes a leader at once (nothing waits for company): it takes what is queued,
which is just its own save when it is alone, and sends it. Saves that arrive while every
connection has a batch in flight queue up; when a batch is answered, the first of them becomes
the next leader and takes the lot. So batches come only from more saves at once than
connections, and a save that finds a connection free is sent as it would be without this module
(the server then groups the flushes of concurrent commits itself).

One save per run per batch: a second save of the same run depends on the first and stays queued
for the next batch. A save returns (or raises) only once its batch is answered; the batch's
sender gives each save its own answer (``Pending.written`` or ``Pending.error``) or tells it to
send itself alone (``Pending.alone``). Threads wake each other with plain locks (one per save,
held until answered): no ``Event``/``Condition`` per save.

What a batch means in PostgreSQL (one transaction, each save's own statement, its own row count)
is the sender's business: ``_pg_batch``.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["GroupCommit", "Pending"]


class Pending:
    """One save waiting for its batch: what to send, and the answer the batch gave it."""

    __slots__ = ("alone", "done", "error", "fence", "key", "params", "save", "statement", "waiter", "written")

    def __init__(self, key: str, statement: bytes, params: dict[str, Any], save: Any, fence: int | None) -> None:
        self.key = key  # the run id: one save per run in a batch
        self.statement = statement
        self.params = params
        self.save = save
        self.fence = fence
        self.done = False
        """Answered: ``written``, or refused (not ``written``), or ``error``."""
        self.written = False
        self.error: BaseException | None = None
        self.alone: bool | None = None
        """Not answered by its batch: send it alone (True: the batch's commit may have written it)."""
        self.waiter = threading.Lock()
        self.waiter.acquire()  # released once: answered, or made leader


Send = Callable[[list[Pending]], None]
"""Sends a batch (sorted by run id) and sets each save's answer; may raise for the whole batch."""


class GroupCommit:
    """Leader/follower queue of saves over one ``send`` (see the module docstring)."""

    def __init__(self, send: Send, width: int = 1) -> None:
        self._send = send
        self._width = max(1, width)
        self._lock = threading.Lock()
        self._queue: list[Pending] = []
        self._leading = 0
        """Leaders sending a batch now (at most ``width``)."""
        self.batches = 0
        """Batches sent so far (for tests and benchmarks)."""

    def submit(self, pending: Pending) -> None:
        """Returns once ``pending`` is answered (``done``) or to be sent alone (``alone``)."""
        with self._lock:
            lead = self._leading < self._width
            if lead:
                self._leading += 1
                batch = self._take(pending)
            else:
                self._queue.append(pending)
        if not lead:
            pending.waiter.acquire()  # woken: answered, or made the next leader
            if pending.done or pending.alone is not None:
                return
            with self._lock:
                batch = self._take(pending)
        try:
            self._send(batch)
        except BaseException as exc:
            for other in batch:
                if other is not pending and not other.done:
                    if isinstance(exc, Exception):
                        other.error = copy.copy(exc)  # its own object: raised in its own thread
                        other.error.__cause__ = exc
                        other.done = True
                    else:  # an interrupt of the leader's thread: the others go on, alone
                        other.alone = True
            raise
        finally:
            self._hand_over(batch, pending)

    def _take(self, leader: Pending) -> list[Pending]:
        """The batch of ``leader`` (called holding the lock): its own save and the oldest queued
        save of each other run, sorted by run id (so batches lock the runs they share in one
        order)."""
        batch = {leader.key: leader}
        rest: list[Pending] = []
        for item in self._queue:
            if item.key in batch:
                rest.append(item)
            else:
                batch[item.key] = item
        self._queue = rest
        self.batches += 1
        return [batch[key] for key in sorted(batch)]

    def _hand_over(self, batch: list[Pending], leader: Pending) -> None:
        for item in batch:
            if item is not leader:
                if not item.done and item.alone is None:
                    item.alone = True  # the sender left it unanswered: it may have been written
                item.waiter.release()
        with self._lock:
            if self._queue:
                self._queue.pop(0).waiter.release()  # the next leader, in this one's place
            else:
                self._leading -= 1
