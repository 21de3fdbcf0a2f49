"""The S3 store's queue, read a page at a time: one ListObjectsV2 (StartAfter, MaxKeys) names a
page of queued runs in submission order, then one GET per run of the page.

Objects under the store's prefix::

    queue/RUN                       the submission (task, agent, submitted_at), create-only: the
                                    one that decides whether the run is queued
    order/MICROS-RUN                an empty object named so that names sort as the queue:
                                    MICROS is submitted_at in microseconds, zero-padded to 20
                                    digits, so (submitted_at, run_id) order is key order (empty:
                                    an order object left behind holds none of the task's text)
    meta/queue-order                written once the order objects of every submission exist

``submit`` writes the order object first, then ``queue/RUN`` create-only; a submission that
loses that race (the run was queued already) deletes its own order object. A crash between
the two writes leaves an order object with no submission, or one naming another time: readers
check each against ``queue/RUN`` and skip it (never delete it: a submit may be between its two
writes). ``submitted_at`` is kept to the microsecond, the precision of the names.

Upgrade rule: a store written before the order objects existed gets them at its first open by
this version (one listing of ``queue/`` and one GET and PUT per queued run, then
``meta/queue-order``); stop older processes that submit runs before opening it with this one
(their submissions would have no order object, and claims would not see them).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from ._s3_layout import Head
from ._s3_objects import PreconditionFailed
from .backend import RunHead, Submission

if TYPE_CHECKING:
    from ._s3_objects import Bucket

ORDER = "order/"
BUILT = "meta/queue-order"
MICROS = 1_000_000


def order_name(submitted_at: float, run_id: str) -> str:
    """The order object's name: sorts as (submitted_at, run_id) (times at or after 1970)."""
    return f"{ORDER}{round(submitted_at * MICROS):020d}-{run_id}"


def _submission_body(submission: Submission) -> bytes:
    data = {"task": submission.task, "agent": submission.agent, "submitted_at": submission.submitted_at}
    return json.dumps(data).encode()


class S3Queue:
    """The queue primitives of ``S3Store`` (mixed into it; uses its head helpers)."""

    objects: Bucket

    def _fetch_head(self, run_id: str) -> tuple[Head, str] | None:
        raise NotImplementedError

    @staticmethod
    def _as_run_head(head: Head) -> RunHead:
        raise NotImplementedError

    # ------------------------------------------------------------------ writing

    def add_submission(self, submission: Submission) -> Submission | None:
        submission = replace(submission, submitted_at=round(submission.submitted_at * MICROS) / MICROS)
        body, order = _submission_body(submission), order_name(submission.submitted_at, submission.run_id)
        self.objects.put(order, b"")
        try:
            self.objects.put(f"queue/{submission.run_id}", body, create_only=True)
            return None
        except PreconditionFailed:
            queued = self.submission(submission.run_id)
            if queued is None or order_name(queued.submitted_at, queued.run_id) != order:
                self.objects.delete([order])  # ours only: the run is queued under its own name
            return queued

    def _queue_names(self, run_id: str) -> list[str]:
        """The objects that queue the run (for ``remove_run``): its submission and its order object."""
        queued = self.submission(run_id)
        names = [f"queue/{run_id}"]
        return names if queued is None else [order_name(queued.submitted_at, run_id), *names]

    def build_queue_order(self) -> None:
        """Give every submission its order object, once per store (the upgrade rule above):
        one GET when done already."""
        if self.objects.get(BUILT) is not None:
            return
        names = self.objects.names("queue/")
        found = self.objects.parallel(self.objects.get, names)
        for name, item in zip(names, found, strict=True):
            if item is not None:
                queued = _parse(name.split("/", 1)[1], item[0])
                self.objects.put(order_name(queued.submitted_at, queued.run_id), b"")
        with contextlib.suppress(PreconditionFailed):  # another process built it at the same time
            self.objects.put(BUILT, b"{}", create_only=True)

    # ------------------------------------------------------------------ reading

    def submission(self, run_id: str) -> Submission | None:
        """One GET of ``queue/RUN``."""
        found = self.objects.get(f"queue/{run_id}")
        return _parse(run_id, found[0]) if found is not None else None

    def _queue_page(
        self, after: tuple[float, str] | None, limit: int, *, heads: bool = False
    ) -> tuple[list[tuple[Submission, Head | None]], str | None]:
        """Up to ``limit`` queued runs strictly after the cursor, oldest first, each with its
        head when ``heads`` (else None), and the last order name read (None: the queue ends
        here). One LIST, then one GET per name listed (and one of its head), all in parallel:
        a head does not depend on its submission, so no second round trip waits on the first."""
        start = order_name(*after) if after is not None else None
        names = self.objects.names_after(ORDER, start, limit)
        run_ids = [name[len(ORDER) :].split("-", 1)[1] for name in names]
        reads: list[Callable[[], Any]] = [partial(self.submission, run_id) for run_id in run_ids]
        if heads:
            reads += [partial(self._fetch_head, run_id) for run_id in run_ids]
        found = self.objects.parallel(lambda read: read(), reads)
        fetched: list[Any] = found[len(run_ids) :] if heads else [None] * len(run_ids)
        page = [
            (queued, head[0] if head is not None else None)
            for name, queued, head in zip(names, found[: len(run_ids)], fetched, strict=True)
            if queued is not None and order_name(queued.submitted_at, queued.run_id) == name
        ]
        return page, (names[-1] if len(names) >= limit else None)

    def queue_from(
        self, after: tuple[float, str] | None, size: int, *, heads: bool = False
    ) -> Iterator[list[tuple[Submission, Head | None]]]:
        """The queue from the cursor on, in pages of ``size`` names, lazily (``_queue_page``)."""
        while True:
            page, last = self._queue_page(after, size, heads=heads)
            yield page
            if last is None:
                return
            micros, run_id = last[len(ORDER) :].split("-", 1)
            after = (int(micros) / MICROS, run_id)

    def heads_of(self, page: Sequence[Submission]) -> list[Head | None]:
        """The heads of a page's runs, read in parallel (None: the run has no head)."""
        found = self.objects.parallel(self._fetch_head, [queued.run_id for queued in page])
        return [item[0] if item is not None else None for item in found]

    def phase_of(self, run_id: str) -> str | None:
        """One GET of the run's head."""
        found = self._fetch_head(run_id)
        if found is None or int(found[0]["seq"]) == 0:
            return None
        phase: Any = (found[0].get("summary") or {}).get("phase")
        return str(phase) if phase is not None else None

    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        """Pages of the queue until ``limit`` runs with no save point are found: a LIST and two
        GETs per run read (its submission and its head); the started runs lying before them are
        read too, as the SQL stores' indexes do."""
        return [item for item, _ in self.unstarted_with_heads(after, limit)]

    def unstarted_with_heads(
        self, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[Submission, RunHead | None]]:
        """``unstarted_page`` with the heads it chose the rows by (no second read per row)."""
        page: list[tuple[Submission, RunHead | None]] = []
        for queued in self.queue_from(after, max(limit, 1), heads=True):
            for item, head in queued:
                if head is None or int(head["seq"]) == 0:
                    page.append((item, self._as_run_head(head) if head is not None else None))
                    if len(page) >= limit:
                        return page
        return page

    def claimable_page(
        self, agent: str | None, blocked: frozenset[str], after: tuple[float, str] | None, limit: int
    ) -> list[Submission]:
        """Pages of the queue until ``limit`` runs for ``agent`` whose phase is not ``blocked``
        are found (a short page is the last): a LIST and two GETs per run read."""
        page: list[Submission] = []
        for queued in self.queue_from(after, max(limit, 1)) if limit > 0 else ():
            wanted = [item for item, _ in queued if agent is None or item.agent == agent]
            for item, head in zip(wanted, self.heads_of(wanted), strict=True):
                if head is None or int(head["seq"]) == 0 or (head.get("summary") or {}).get("phase") not in blocked:
                    page.append(item)
                    if len(page) >= limit:
                        return page
        return page


def _parse(run_id: str, body: bytes) -> Submission:
    data = json.loads(body)
    return Submission(run_id, data["task"], data["agent"], float(data["submitted_at"]))
