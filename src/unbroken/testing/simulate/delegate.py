"""A ``Store`` that hands every primitive to another store: the base of the fault-injecting
wrapper and of the deliberately broken backends. Reads that a backend may serve its own way
(packed segments) are handed on too, so the real backend's read path runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...codec import EncodedSave, PackedRecords, Segment, StoredRecord
from ...state import RunSummary
from ...stores.backend import RunHead, SealedEntry, Submission
from ...stores.base import Store


class Delegating(Store):
    """Every primitive of ``inner``, unchanged; subclasses change one thing."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.capabilities = inner.capabilities
        self.durability = inner.durability
        self.sealed_read_from = inner.sealed_read_from

    def store_time(self) -> float:
        return self.inner.store_time()

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
        return self.inner.snapshot_seq(run_id, upto_seq)

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        return self.inner.read_raw_records(run_id)

    def iter_raw_records(self, run_id: str) -> Iterable[StoredRecord]:
        return self.inner.iter_raw_records(run_id)

    def iter_load_pieces(self, run_id: str) -> Iterable[StoredRecord | Segment]:
        return self.inner.iter_load_pieces(run_id)

    def read_packed(self, run_id: str) -> PackedRecords | None:
        return self.inner.read_packed(run_id)

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
        return self.inner.add_submission(submission)

    def list_submissions(self) -> list[Submission]:
        return self.inner.list_submissions()

    def close(self) -> None:
        """The inner store is the world's to close."""
