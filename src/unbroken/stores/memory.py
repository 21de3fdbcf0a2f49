"""The reference store: the primitives of ``backend.py`` over dicts, for tests. Same contract
as the durable stores (one lock makes every primitive atomic), nothing survives the process."""

from __future__ import annotations

import bisect
import heapq
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import clock
from ..codec import EncodedSave, StoredRecord
from ..state import RunSummary
from ._boot_lease_clock import BootLeaseClock
from .backend import Durability, QueueBackend, Refused, RunHead, SealedEntry, Submission
from .base import Store


@dataclass
class _Run:
    head: RunHead = field(default_factory=RunHead)
    records: list[StoredRecord] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    summary: RunSummary | None = None
    ledger: dict[str, SealedEntry] = field(default_factory=dict)


def _seq(record: StoredRecord) -> int:
    return record.seq


class InMemoryBackend(QueueBackend):
    """The primitives of ``memory://``: a store in this process's memory."""

    durability: Durability = "memory"

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._lease_clock = BootLeaseClock()
        self._queue: dict[str, Submission] = {}

    def _fenced(self, run_id: str, fence: int | None) -> _Run:
        run = self._runs.get(run_id) or _Run()
        if fence is not None and run.head.fence != fence:
            raise Refused
        return self._runs.setdefault(run_id, run)

    # ------------------------------------------------------------------ head and clock

    def store_time(self) -> float:
        return clock.wall()

    def lease_time(self) -> float:
        return self._lease_clock.now()  # the boot clock: no wall-clock step moves a lease

    def read_head(self, run_id: str) -> RunHead | None:
        with self._lock:
            run = self._runs.get(run_id)
            return run.head if run is not None else None

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        with self._lock:
            if self.read_head(run_id) != expected:
                return False
            self._runs.setdefault(run_id, _Run()).head = new
            return True

    # ------------------------------------------------------------------ records

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        with self._lock:
            head = self.read_head(save.run_id) or RunHead()
            if head.seq != expect_seq or (fence is not None and head.fence != fence):
                raise Refused
            run = self._runs.setdefault(save.run_id, _Run())
            run.records.append(StoredRecord(save.seq, save.body, save.checksum))
            if save.snapshot:
                run.snapshots.append(save.seq)
            run.summary, run.head = save.summary, RunHead(save.seq, head.fence, head.owner, head.expires_at)
            run.ledger.update((sealed.entry.key, sealed) for sealed in entries)

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        with self._lock:
            head = self.read_head(run_id) or RunHead()
            if head.seq != expect_seq or (fence is not None and head.fence != fence):
                raise Refused
            run = self._runs.setdefault(run_id, _Run())
            run.records = [StoredRecord(s.seq, s.body, s.checksum) for s in saves]
            run.snapshots = [s.seq for s in saves if s.snapshot]
            run.summary, run.head = saves[-1].summary, RunHead(saves[-1].seq, head.fence, head.owner, head.expires_at)

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        with self._lock:
            run = self._runs.get(run_id)
            return [r for r in run.records if r.seq > after_seq] if run is not None else []

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        # Bounded: two binary searches on the run's records (kept in seq order).
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return []
            start = bisect.bisect_right(run.records, after_seq, key=_seq)
            return run.records[start : bisect.bisect_right(run.records, upto_seq, key=_seq, lo=start)]

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or not run.snapshots:
                return 0
            if upto_seq is None:
                return run.snapshots[-1]
            index = bisect.bisect_right(run.snapshots, upto_seq)  # one binary search
            return run.snapshots[index - 1] if index else 0

    def list_summaries(self) -> list[RunSummary]:
        with self._lock:
            return [run.summary for run in self._runs.values() if run.summary is not None and run.records]

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        """No index here (a test store): one pass over the runs keeping the ``limit`` newest
        (O(runs) time)."""
        rows = (row for row in self.list_summaries() if after is None or (row.updated_at, row.run_id) < after)
        return heapq.nlargest(max(limit, 0), rows, key=lambda row: (row.updated_at, row.run_id))

    def remove_run(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
            self._queue.pop(run_id, None)

    # ------------------------------------------------------------------ effect ledger

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        with self._lock:
            run = self._fenced(sealed.entry.run_id, fence)
            if sealed.entry.key in run.ledger:
                return run.ledger[sealed.entry.key]
            run.ledger[sealed.entry.key] = sealed
            return None

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        with self._lock:
            self._fenced(sealed.entry.run_id, fence).ledger[sealed.entry.key] = sealed

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        with self._lock:
            run = self._runs.get(run_id)
            return run.ledger.get(key) if run is not None else None

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        with self._lock:
            run = self._runs.get(run_id)
            return list(run.ledger.values()) if run is not None else []

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        with self._lock:
            ledger = self._runs[run_id].ledger if run_id in self._runs else {}
            for key in keys:
                ledger.pop(key, None)

    # ------------------------------------------------------------------ submissions

    def add_submission(self, submission: Submission) -> Submission | None:
        with self._lock:
            existing = self._queue.get(submission.run_id)
            if existing is None:
                self._queue[submission.run_id] = submission
            return existing

    def list_submissions(self) -> list[Submission]:
        with self._lock:
            return sorted(self._queue.values(), key=lambda s: (s.submitted_at, s.run_id))

    def submission(self, run_id: str) -> Submission | None:
        with self._lock:
            return self._queue.get(run_id)

    def phase_of(self, run_id: str) -> str | None:
        with self._lock:
            run = self._runs.get(run_id)
            return run.summary.phase if run is not None and run.summary is not None and run.records else None


class InMemoryStore(Store):
    """``memory://``: a store in this process's memory (``Store``'s rules over ``InMemoryBackend``)."""

    backend: InMemoryBackend

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(InMemoryBackend(url))
