"""Encryption at rest, in one place above every backend: ``EncryptedStore(store, keys)``.

It is a ``Store`` over an ``EncryptedBackend``, which holds another store and seals what that
store's backend is given, opening what it returns, so every rule of ``Store`` (and every reader:
load, tail and paged reads, watch, export, fork, erase) sees plain records and every backend
keeps only sealed ones:

* save record bodies (snapshots included) under the run's data key, bound to (run id, seq):
  a body moved to another run or position does not open and is reported as damaged
  (``CorruptCheckpoint``), like a record failing its checksum;
* ledger results (a tool's output), bound to (run id, ledger key);
* the task in a run's summary and its queue entry, bound to the run id.

Clear: run ids, seqs, labels, phases, counters, timestamps, the snapshot flag, ledger keys,
tool names, statuses and argument hashes (listings, claims and paging need them).

Each run's data key is random, kept wrapped by the user's ``KeyProvider`` in a reserved ledger
entry (``_data_keys``), and destroyed first when the run is removed (crypto-shredding). A store
with keys reads plaintext runs as they are (mixed stores); a run sealed from save N on refuses a
plaintext record at N or later.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from .. import crashpoints
from ..acceptance import REFUSED
from ..codec import EncodedSave, PackedRecords, Segment, StoredRecord
from ..encryption import KeyProvider
from ..encryption._cipher import DecryptFailed, RunCipher, is_sealed_text, new_data_key
from ..errors import EncryptionKeyMissing, UnbrokenError, WrongEncryptionKey
from ..state import RunSummary, check_run_id
from ._data_keys import DATA_KEY, KeyRecord, key_entry, read_key_entry, rewrapped
from ._sealing import (
    OpenedRun,
    open_packed,
    open_record,
    open_sealed_records,
    open_segment,
    refused,
    seal_entry,
    seal_save,
    seal_segment,
    seal_task,
)
from .backend import (
    Backend,
    BytesBodies,
    ClaimedRun,
    Durability,
    Queue,
    QueueBackend,
    RunHead,
    SealableSegments,
    SealedEntry,
    ServerCheck,
    Submission,
    entry_checksum,
    seal,
)
from .base import Store

CACHED_RUNS = 1024
"""Data keys kept unwrapped in memory (most recently used runs): bounded, however many runs."""


def _as_text(record: StoredRecord) -> StoredRecord:
    """``record`` with its body as str, as ``records_after`` gives bodies (invalid UTF-8, which
    no intact record holds, replaced: its checksum then fails)."""
    if type(record.body) is bytes:
        record.body = record.body.decode("utf-8", errors="replace")
    return record


class EncryptedBackend(Backend):
    """``inner``'s backend with everything user-written sealed under per-run data keys wrapped
    by ``keys``. Its loader reads go through ``inner`` (so the inner backend's fast paths run)
    and are opened here; it declares ``SnapshotIndex``, ``RawReads``, ``StreamedReads``,
    ``SegmentReads``, ``PackedReads`` and ``ServerCheck`` (the inner one's, when it has one)."""

    def __init__(self, inner: Store, keys: KeyProvider, *, key_store: Store | None = None) -> None:
        self.outer, self.keys = inner, keys
        self.inner = inner.backend
        self.key_store = (key_store if key_store is not None else inner).backend
        self.url = inner.url
        self.reach = inner.backend.reach
        self.durability = inner.durability
        self.concurrency = inner.concurrency
        self._server = inner.backend if isinstance(inner.backend, ServerCheck) else None
        self._runs: OrderedDict[str, OpenedRun] = OrderedDict()
        self._lock = threading.Lock()
        self._sealable = inner.backend if isinstance(inner.backend, SealableSegments) else None
        self._raw = isinstance(inner.backend, BytesBodies)  # sealed records kept as raw bytes, not hex text
        if self._sealable is not None:
            self._sealable.seal_segments_with(self)  # its packs of this store's runs: one sealed unit each

    # ------------------------------------------------------------------ data keys

    def _unwrap(self, run_id: str, record: KeyRecord) -> bytes:
        try:
            return self.keys.unwrap(record.envelope)
        except WrongEncryptionKey as exc:
            raise WrongEncryptionKey(f"run {run_id!r}: {exc}", last_good_seq=None) from None
        except EncryptionKeyMissing as exc:
            raise EncryptionKeyMissing(f"run {run_id!r} is encrypted at rest: {exc}") from None

    def _opened(self, run_id: str, sealed: SealedEntry) -> OpenedRun:
        record = read_key_entry(run_id, sealed)
        run = OpenedRun(run_id, RunCipher(run_id, self._unwrap(run_id, record)), record)
        with self._lock:
            self._runs[run_id] = run
            self._runs.move_to_end(run_id)
            while len(self._runs) > CACHED_RUNS:
                self._runs.popitem(last=False)
        return run

    def _writing(self, run_id: str) -> OpenedRun:
        """The run's data key for a write that is not a save (a ledger entry, a submission): made
        if the run has none, sealing from its next save on (its saves so far stay as they are)."""
        with self._lock:
            cached = self._runs.get(run_id)
        if cached is not None:
            return cached
        head = self.inner.read_head(run_id)
        run = self._run(run_id, create_from=(head.seq if head is not None else 0) + 1)
        assert run is not None
        return run

    def _run(self, run_id: str, *, create_from: int | None = None, fresh: bool = False) -> OpenedRun | None:
        """The run's opened data key; None if it has none. ``create_from``: make one if there is
        none (sealing from that save on), insert-if-absent, so concurrent writers share one.
        ``fresh``: read the stored entry even if one is cached (a run created anew elsewhere)."""
        if not fresh:
            with self._lock:
                cached = self._runs.get(run_id)
            if cached is not None:
                return cached
        stored = self.key_store.get_entry(run_id, DATA_KEY)
        if stored is None and create_from is not None:
            record = KeyRecord(self.keys.wrap(new_data_key()), create_from, self._has_entries(run_id, create_from))
            made = key_entry(run_id, record)
            stored = self.key_store.insert_entry(made, fence=None) or made
        if stored is None:
            with self._lock:
                self._runs.pop(run_id, None)
            return None
        return self._opened(run_id, stored)

    def _has_entries(self, run_id: str, create_from: int) -> bool:
        """Whether the run may hold ledger entries written in clear before its data key: it has
        saves already, or an entry (one bounded read, once per run: when its data key is made)."""
        if create_from > 1:
            return True
        return any(s.entry.key != DATA_KEY for s in self.inner.entries_page(run_id, None, 2))

    def rewrap(self, run_id: str) -> bool | None:
        """Re-wrap the run's data key under the provider's current key if another key wraps it:
        one atomic replace of its entry, no record rewritten. True: re-wrapped; False: already
        current; None: the run has no data key (or was erased meanwhile). An erase running at the
        same time is never undone: one that removed the run before the replace landed has its
        key removed again here (and ``remove_run`` removes the key before and after the run)."""
        stored = self.key_store.get_entry(run_id, DATA_KEY)
        if stored is None:
            return None
        record = read_key_entry(run_id, stored)
        if record.kid == self.keys.current_kid:
            return False
        envelope = self.keys.wrap(self._unwrap(run_id, record))
        self.key_store.put_entry(rewrapped(stored, envelope), fence=None)
        if self._gone(run_id):
            self.key_store.delete_entries(run_id, [DATA_KEY])
            return None
        crashpoints.hit("keys.rotate.rewrapped")
        return True

    def _gone(self, run_id: str) -> bool:
        """Whether the run no longer exists (no head, no queue entry): erased or deleted."""
        if self.inner.read_head(run_id) is not None:
            return False
        return self.outer.queued(run_id) is None

    # ------------------------------------------------------------------ sealing

    def _open_entry(self, run_id: str, sealed: SealedEntry | None) -> SealedEntry | None:
        """The entry as written, its result opened; its checksum stays the stored one's verdict
        (an entry edited as stored still fails it above, with the edit shown). One that does not
        open comes back as stored with ``REFUSED`` and the reason for its checksum."""
        if sealed is None:
            return None
        entry = sealed.entry
        if entry.result is None:
            return sealed
        if not is_sealed_text(entry.result.content):
            run = self._run(run_id)
            if run is None or run.plain_entries:
                return sealed  # a plaintext run, or one that held entries before it was encrypted
            return SealedEntry(
                entry,
                f"{REFUSED}its result is stored in plaintext where run {run_id!r} is encrypted (every entry of "
                f"it is sealed under key id {run.kid!r}): a replaced or foreign entry",
            )
        intact = sealed.checksum is None or sealed.checksum == entry_checksum(entry)
        try:
            try:
                content = self._open_text(entry.run_id, "ledger", entry.key, entry.result.content, fresh=False)
            except DecryptFailed:  # a data key cached before the run was made anew elsewhere: look again
                content = self._open_text(entry.run_id, "ledger", entry.key, entry.result.content, fresh=True)
        except DecryptFailed as exc:  # handed on refused: every rule above reports it, none uses it
            return SealedEntry(entry, f"{REFUSED}does not decrypt ({exc}): moved from another entry or run, or edited")
        opened = replace(entry, result=replace(entry.result, content=content))
        return SealedEntry(opened, entry_checksum(opened) if intact else sealed.checksum)

    def _open_text(self, run_id: str, kind: str, position: str, text: str, *, fresh: bool) -> str:
        run = self._run(run_id, fresh=fresh)
        if run is None:
            raise DecryptFailed(f"run {run_id!r} has no data key any more (erased, or its key entry lost)")
        return run.cipher.open_text(kind, position, text)

    def _open_task(self, run_id: str, task: str) -> str:
        if not is_sealed_text(task):
            return task
        try:
            run = self._run(run_id)
            if run is None:
                return "[encrypted: the run has no data key any more]"
            return run.cipher.open_text("task", "0", task)
        except (UnbrokenError, DecryptFailed) as exc:  # one unreadable run does not hide a listing
            return f"[encrypted: {type(exc).__name__}]"

    def _open_records(
        self, run_id: str, records: Iterable[StoredRecord | Segment], text: bool
    ) -> Iterator[StoredRecord]:
        """The records as written: sealed ones opened (their envelope's checksum checked first),
        plaintext ones as they are; one that fails is handed on refused, with the reason, so the
        loader reports it as that record's damage. The run's key is looked up first, before the
        store's read starts (a missing or wrong key raises here)."""
        run = self._run(run_id)
        return self._opening(run_id, run, iter(records), text)

    def _opening(
        self, run_id: str, run: OpenedRun | None, records: Iterator[StoredRecord | Segment], text: bool
    ) -> Iterator[StoredRecord]:
        refreshed = False
        try:
            for item in records:
                if type(item) is Segment and run is not None and item.sealed:
                    unit = open_sealed_records(run, item, text)
                    if isinstance(unit, str) and not refreshed:  # (a data key cached before an erase: as below)
                        run, refreshed = self._run(run_id, fresh=True), True
                        unit = unit if run is None else open_sealed_records(run, item, text)
                    yield from (refused(record, unit) for record in item.records()) if isinstance(unit, str) else unit
                    continue
                if type(item) is Segment and run is not None:
                    fast = open_segment(run, item, text)  # (all opened in one loop: the common case)
                    if fast is not None:
                        yield from fast
                        continue
                for record in item.records() if type(item) is Segment else (item,):
                    opened = open_record(run_id, run, record, text)  # type: ignore[arg-type]
                    if opened.checksum.startswith(REFUSED) and not refreshed:
                        # A data key cached before the run was erased and made anew elsewhere:
                        # read the stored key once before calling the record damaged.
                        run, refreshed = self._run(run_id, fresh=True), True
                        opened = open_record(run_id, run, record, text)  # type: ignore[arg-type]
                    yield opened
        finally:
            close = getattr(records, "close", None)  # a store's generator: end its read now
            if close is not None:
                close()

    # ------------------------------------------------------------------ records

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        run = self._run(save.run_id, create_from=save.seq, fresh=expect_seq == 0)
        assert run is not None
        sealed = [seal(seal_entry(run, entry.entry)) for entry in entries]
        self.inner.write_record(seal_save(run, save, raw=self._raw), sealed, expect_seq=expect_seq, fence=fence)

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        run = self._run(run_id, create_from=saves[0].seq, fresh=expect_seq == 0)
        assert run is not None
        sealed = [seal_save(run, save, raw=self._raw) for save in saves]
        self.inner.replace_records(run_id, sealed, expect_seq=expect_seq, fence=fence)

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        if self._sealable is not None:
            return self._records_in(run_id, self._sealable.pieces_between(run_id, after_seq, None), after_seq, None)
        return list(self._open_records(run_id, self.inner.records_after(run_id, after_seq), text=True))

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        if self._sealable is not None:
            pieces = self._sealable.pieces_between(run_id, after_seq, upto_seq)
            return self._records_in(run_id, pieces, after_seq, upto_seq)
        return list(self._open_records(run_id, self.inner.records_between(run_id, after_seq, upto_seq), text=True))

    def _records_in(
        self, run_id: str, pieces: list[StoredRecord | Segment], after_seq: int, upto_seq: int | None
    ) -> list[StoredRecord]:
        """The records of ``pieces`` (whole segments: a sealed one opens only whole) opened, those
        with ``after_seq`` < seq (<= ``upto_seq``), bodies as text (as ``records_after`` gives them)."""
        top = upto_seq if upto_seq is not None else float("inf")
        return [_as_text(r) for r in self._open_records(run_id, pieces, text=True) if after_seq < r.seq <= top]

    def seal_segment(self, run_id: str, segment: Segment) -> Segment | None:
        """``SegmentSealer`` for the inner store's packs: ``segment`` sealed as one unit under the
        run's data key, if it is in memory already (the save just made put it there; no store
        read inside the store's write); None (packed as it is) otherwise."""
        with self._lock:
            run = self._runs.get(run_id)
        return None if run is None else seal_segment(run, segment)

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        return self.outer.newest_snapshot(run_id, upto_seq)  # the flag stays clear (the envelope's "snapshot")

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        return list(self.iter_raw_records(run_id))

    def iter_raw_records(self, run_id: str) -> Iterable[StoredRecord]:
        return self._open_records(run_id, self.outer.iter_load_pieces(run_id), text=False)  # its fast path

    def iter_load_pieces(self, run_id: str) -> Iterable[StoredRecord | Segment]:
        return self.iter_raw_records(run_id)  # (a segment's sealed bodies opened in one loop, handed on one by one)

    def read_packed(self, run_id: str) -> PackedRecords | None:
        packed = self.outer.read_packed(run_id)  # the inner store's packed read (``PackedReads``)
        if packed is None:
            return None
        run = self._run(run_id)
        # None when one does not open (or a mixed run's plaintext records): the loader then reads
        # record by record (``iter_load_pieces``), which says which record is wrong and why.
        return packed if run is None else open_packed(run, packed)

    def list_summaries(self) -> list[RunSummary]:
        return [self._open_summary(row) for row in self.inner.list_summaries()]

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        return [self._open_summary(row) for row in self.inner.summaries_page(after, limit)]

    def saved_task(self, run_id: str, default: str) -> str:
        """``Store._saved_task`` for ``EncryptedStore``."""
        # The clear rows, and that one run's task opened: never every run's data key unwrapped.
        row = next((row for row in self.inner.list_summaries() if row.run_id == run_id), None)
        return default if row is None else self._open_summary(row).task

    def _open_summary(self, row: RunSummary) -> RunSummary:
        return row if not is_sealed_text(row.task) else replace(row, task=self._open_task(row.run_id, row.task))

    def remove_run(self, run_id: str) -> None:
        # The data key first: once it is gone, every copy of the run's sealed bytes the store
        # cannot reach (a backup, a replica, a WAL, an old S3 version) is unreadable.
        self.key_store.delete_entries(run_id, [DATA_KEY])
        with self._lock:
            self._runs.pop(run_id, None)
        crashpoints.hit("erase.data_key_destroyed")
        self.inner.remove_run(run_id)
        if self.key_store is not self.inner:  # (a rotation that re-wrapped it meanwhile: see ``rewrap``)
            self.key_store.delete_entries(run_id, [DATA_KEY])

    def scrub(self) -> str:
        done = self.inner.scrub()
        if self.key_store is not self.inner:
            keys = self.key_store.scrub()
            done = f"{done or 'deleted'}; key store: {keys or 'deleted'}"
        return done

    def check_server(self) -> Durability:
        """The inner backend's server check (``ServerCheck``), or its declared durability."""
        return self.durability if self._server is None else self._server.check_server()

    # ------------------------------------------------------------------ effect ledger

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        run = self._writing(sealed.entry.run_id)
        existing = self.inner.insert_entry(seal(seal_entry(run, sealed.entry)), fence=fence)
        return self._open_entry(sealed.entry.run_id, existing)

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        run = self._writing(sealed.entry.run_id)
        self.inner.put_entry(seal(seal_entry(run, sealed.entry)), fence=fence)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        if key == DATA_KEY:
            return None
        return self._open_entry(run_id, self.inner.get_entry(run_id, key))

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        rows = (self._open_entry(run_id, s) for s in self.inner.list_entries(run_id) if s.entry.key != DATA_KEY)
        return [row for row in rows if row is not None]

    def entries_page(self, run_id: str, before: tuple[float, str] | None, limit: int) -> list[SealedEntry]:
        rows = [s for s in self.inner.entries_page(run_id, before, limit + 1) if s.entry.key != DATA_KEY]
        opened = (self._open_entry(run_id, s) for s in rows[:limit])
        return [row for row in opened if row is not None]

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        self.inner.delete_entries(run_id, keys)

    # ------------------------------------------------------------------ head, clock, leases: as they are

    def store_time(self) -> float:
        return self.inner.store_time()

    def lease_time(self) -> float:
        return self.inner.lease_time()

    def read_head(self, run_id: str) -> RunHead | None:
        return self.inner.read_head(run_id)

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        return self.inner.swap_head(run_id, expected, new)

    def close(self) -> None:
        with self._lock:
            self._runs.clear()  # the unwrapped data keys leave memory with the store
        self.outer.close()
        if self.key_store is not self.inner:
            self.key_store.close()


class EncryptedQueueBackend(EncryptedBackend, QueueBackend):
    """``EncryptedBackend`` over a backend with a queue: submissions' tasks sealed too, and the
    inner store's claim (``OneStepClaim``) with the tasks opened."""

    def __init__(self, inner: Store, keys: KeyProvider, *, key_store: Store | None = None) -> None:
        super().__init__(inner, keys, key_store=key_store)
        assert isinstance(inner.backend, Queue)
        self.queue: Queue = inner.backend

    # ------------------------------------------------------------------ submissions

    def _seal_submission(self, submission: Submission) -> Submission:
        run = self._writing(submission.run_id)
        return replace(submission, task=seal_task(run, submission.task))

    def _open_submission(self, submission: Submission | None) -> Submission | None:
        if submission is None or not is_sealed_text(submission.task):
            return submission
        return replace(submission, task=self._open_task(submission.run_id, submission.task))

    def add_submission(self, submission: Submission) -> Submission | None:
        return self._open_submission(self.queue.add_submission(self._seal_submission(submission)))

    def list_submissions(self) -> list[Submission]:
        return [s for s in map(self._open_submission, self.queue.list_submissions()) if s is not None]

    def submission(self, run_id: str) -> Submission | None:
        return self._open_submission(self.queue.submission(run_id))

    def claimable_page(
        self, agent: str | None, blocked: frozenset[str], after: tuple[float, str] | None, limit: int
    ) -> list[Submission]:
        rows = self.queue.claimable_page(agent, blocked, after, limit)
        return [s for s in map(self._open_submission, rows) if s is not None]

    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        rows = self.queue.unstarted_page(after, limit)
        return [s for s in map(self._open_submission, rows) if s is not None]

    def claim_in_one_step(
        self, owner: str, ttl: float, *, agent: str | None, limit: int, blocked: frozenset[str]
    ) -> list[ClaimedRun]:
        """The inner store's claim (its rule, its fast path), the tasks opened."""
        claimed = self.outer.claim_runnable(owner, ttl, agent=agent, limit=limit)
        return [replace(run, task=self._open_task(run.run_id, run.task)) for run in claimed]

    def phase_of(self, run_id: str) -> str | None:
        return self.queue.phase_of(run_id)


class EncryptedStore(Store):
    """``inner`` with everything user-written sealed under per-run data keys wrapped by ``keys``
    (``Store``'s rules over an ``EncryptedBackend``)."""

    backend: EncryptedBackend

    def __init__(self, inner: Store, keys: KeyProvider, *, key_store: Store | None = None) -> None:
        """``key_store``: where the wrapped data keys are kept (default: ``inner``, as reserved
        ledger entries of each run). Another store keeps them apart from the runs, so a copy of
        the runs' store (a backup, a replica) holds no data key at all and an erase shreds the
        run in every such copy; that store then needs its own backups, on its own schedule."""
        if isinstance(inner, EncryptedStore) or isinstance(key_store, EncryptedStore):
            raise ValueError("this store is already encrypted; wrap the plain store once")
        kind = EncryptedQueueBackend if "claim" in inner.capabilities else EncryptedBackend
        super().__init__(kind(inner, keys, key_store=key_store))
        self.sealed_read_from = inner.sealed_read_from

    @property
    def inner(self) -> Store:
        """The store whose backend keeps the sealed runs."""
        return self.backend.outer

    @property
    def keys(self) -> KeyProvider:
        """The key provider that wraps the runs' data keys."""
        return self.backend.keys

    def rewrap(self, run_id: str) -> bool | None:
        """Re-wrap the run's data key under the provider's current key (``EncryptedBackend.rewrap``)."""
        return self.backend.rewrap(check_run_id(run_id))

    def _saved_task(self, run_id: str, default: str) -> str:
        return self.backend.saved_task(run_id, default)  # that one run's task opened, no other run's key

    def _ledger_as_stored(self) -> tuple[Backend, frozenset[str]]:
        # The inner rows (phases and ``updated_at`` are clear): no run's data key unwrapped, no
        # result opened; a run's data key entry is never collected (only ``remove_run`` destroys it).
        return self.backend.inner, frozenset({DATA_KEY})


__all__ = ["CACHED_RUNS", "DATA_KEY", "EncryptedBackend", "EncryptedStore"]
