"""A ``Backend`` that hands every primitive to another backend: the base of the fault-injecting
wrapper and of the deliberately broken backends. Reads that a backend may serve its own way
(packed segments, streamed bytes) are handed on too, so the real backend's read path runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ...codec import EncodedSave, PackedRecords, Segment, StoredRecord
from ...errors import Unsupported
from ...state import RunSummary
from ...stores.backend import (
    Backend,
    PackedReads,
    Queue,
    QueueBackend,
    RawReads,
    RunHead,
    SealedEntry,
    SegmentReads,
    SnapshotIndex,
    StreamedReads,
    Submission,
    scan_for_snapshot,
)
from ...stores.base import Store


class Delegating(QueueBackend):
    """Every primitive of ``inner``, unchanged; subclasses change one thing. (A queue backend:
    over a backend without one, submitting raises ``Unsupported``.)"""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.url = inner.url
        self.reach = inner.reach
        self.durability = inner.durability
        self.concurrency = inner.concurrency
        # What the inner backend declares, checked once (as Store does).
        self._queue = inner if isinstance(inner, Queue) else None
        self._raw = inner if isinstance(inner, RawReads) else None
        self._streamed = inner if isinstance(inner, StreamedReads) else None
        self._segments = inner if isinstance(inner, SegmentReads) else None
        self._packed = inner if isinstance(inner, PackedReads) else None
        self._snapshots = inner if isinstance(inner, SnapshotIndex) else None

    def store_time(self) -> float:
        return self.inner.store_time()

    def lease_time(self) -> float:
        return self.inner.lease_time()  # the inner store's lease clock (the boot clock for a local one)

    def read_head(self, run_id: str) -> RunHead | None:
        return self.inner.read_head(run_id)

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        return self.inner.swap_head(run_id, expected, new)

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        self.inner.write_record(save, entries, expect_seq=expect_seq, fence=fence)

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        self.inner.replace_records(run_id, saves, expect_seq=expect_seq, fence=fence)

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        return self.inner.records_after(run_id, after_seq)

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        return self.inner.records_between(run_id, after_seq, upto_seq)

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        if self._snapshots is None:
            return scan_for_snapshot(self, run_id, upto_seq)
        return self._snapshots.snapshot_seq(run_id, upto_seq)

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        return self.records_after(run_id, 0) if self._raw is None else self._raw.read_raw_records(run_id)

    def iter_raw_records(self, run_id: str) -> Iterable[StoredRecord]:
        return self.read_raw_records(run_id) if self._streamed is None else self._streamed.iter_raw_records(run_id)

    def iter_load_pieces(self, run_id: str) -> Iterable[StoredRecord | Segment]:
        return self.iter_raw_records(run_id) if self._segments is None else self._segments.iter_load_pieces(run_id)

    def read_packed(self, run_id: str) -> PackedRecords | None:
        return None if self._packed is None else self._packed.read_packed(run_id)

    def list_summaries(self) -> list[RunSummary]:
        return self.inner.list_summaries()

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        return self.inner.summaries_page(after, limit)

    def remove_run(self, run_id: str) -> None:
        self.inner.remove_run(run_id)

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        return self.inner.insert_entry(sealed, fence=fence)

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        self.inner.put_entry(sealed, fence=fence)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        return self.inner.get_entry(run_id, key)

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        return self.inner.list_entries(run_id)

    def entries_page(self, run_id: str, before: tuple[float, str] | None, limit: int) -> list[SealedEntry]:
        return self.inner.entries_page(run_id, before, limit)

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        self.inner.delete_entries(run_id, keys)

    def add_submission(self, submission: Submission) -> Submission | None:
        if self._queue is None:
            raise Unsupported(f"{self.url} keeps no queue of submitted runs")
        return self._queue.add_submission(submission)

    def list_submissions(self) -> list[Submission]:
        return [] if self._queue is None else self._queue.list_submissions()

    def close(self) -> None:
        """The inner store is the world's to close."""


def view(store: Store, wrap: Callable[[Backend], Backend] = Delegating) -> Store:
    """A ``Store`` over ``wrap(store.backend)`` (a ``Delegating`` view by default), loading as
    ``store`` does (its ``sealed_read_from``). Closing it leaves ``store`` open."""
    seen = Store(wrap(store.backend))
    seen.sealed_read_from = store.sealed_read_from
    return seen
