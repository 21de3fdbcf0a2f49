"""Sealing and opening one run's records, ledger results and task under its opened data key
(``stores.encrypted``; the formats are ``encryption._cipher``'s)."""

from __future__ import annotations

from dataclasses import replace

from ..acceptance import REFUSED, checksum
from ..codec import EncodedSave, PackedRecords, Segment, StoredRecord, segment_index
from ..encryption._cipher import DecryptFailed, RunCipher, is_sealed_record
from ..state import LedgerEntry
from ._data_keys import DATA_KEY, KeyRecord


class OpenedRun:
    """A run's data key, opened: its cipher, where sealing started (records; whether ledger
    results in clear may be there), the sealed task (reused)."""

    __slots__ = ("cipher", "from_seq", "kid", "plain_entries", "task")

    def __init__(self, cipher: RunCipher, record: KeyRecord) -> None:
        self.cipher, self.from_seq, self.kid = cipher, record.from_seq, record.kid
        self.plain_entries = record.plain_entries
        self.task: tuple[str, str] | None = None  # (plain, sealed)


def seal_save(run: OpenedRun, save: EncodedSave) -> EncodedSave:
    """``save`` with its body, its summary's task and its ledger results sealed."""
    body = run.cipher.seal_record(save.seq, save.body, save.snapshot)
    return replace(
        save,
        body=body,
        checksum=checksum(body),
        summary=replace(save.summary, task=seal_task(run, save.summary.task)),
        ledger=tuple(seal_entry(run, entry) for entry in save.ledger),
    )


def seal_task(run: OpenedRun, task: str) -> str:
    if run.task is None or run.task[0] != task:
        run.task = (task, run.cipher.seal_text("task", "0", task))
    return run.task[1]


def seal_entry(run: OpenedRun, entry: LedgerEntry) -> LedgerEntry:
    """``entry`` with its result sealed (bound to the run and the ledger key)."""
    if entry.key == DATA_KEY:
        raise ValueError(f"ledger key {DATA_KEY!r} is reserved for the run's data key")
    if entry.result is None:
        return entry
    sealed = run.cipher.seal_text("ledger", entry.key, entry.result.content)
    return replace(entry, result=replace(entry.result, content=sealed))


def open_record(run_id: str, run: OpenedRun | None, record: StoredRecord, text: bool) -> StoredRecord:
    """The record as written: opened if sealed, as it is if plaintext; refused (``REFUSED`` and
    the reason for its checksum) when it does not open, or is plaintext where the run is sealed."""
    body = record.body
    if not is_sealed_record(body):
        if run is not None and record.seq >= run.from_seq and is_crc(record.checksum):
            return refused(
                record,
                f"it is stored in plaintext where run {run_id!r} is encrypted (from save {run.from_seq} on): "
                "a replaced record",
            )
        return record
    try:
        if run is None:
            raise DecryptFailed(f"run {run_id!r} has no data key any more (erased, or its key entry lost)")
        plain = run.cipher.open_record(record.seq, body)
    except DecryptFailed as exc:
        if checksum(body) != record.checksum:
            return record  # torn or edited as stored: judged (and named) by the loader
        return refused(record, f"it does not decrypt ({exc}): moved from another run or position, or edited")
    return StoredRecord(record.seq, plain.decode() if text else plain, checksum(plain))


def open_segment(run: OpenedRun, segment: Segment, text: bool) -> list[StoredRecord] | None:
    """The records of a segment of sealed records, opened in one loop (``RunCipher.open_bodies``),
    each bound to its seq by its position in the segment (a segment moved to other seqs or
    another run does not open); None unless all open (then record by record: ``open_record``)."""
    index = segment_index(segment.index_text, segment.first, segment.last, len(segment.bodies))
    if index is None:
        return None
    opened = run.cipher.open_bodies(segment.bodies, [(seq, length) for seq, _, length in index])
    if opened is None:
        return None
    return [
        StoredRecord(seq, plain.decode() if text else plain, checksum(plain))
        for (seq, _, _), plain in zip(index, opened, strict=True)
    ]


def open_packed(run: OpenedRun, packed: PackedRecords) -> PackedRecords | None:
    """A store's packed read of sealed records, opened in one loop; None unless all open."""
    opened = run.cipher.open_bodies(packed.buffer, [(seq, length) for seq, _, length in packed.index])
    if opened is None:
        return None
    index = [(seq, checksum(plain), len(plain)) for (seq, _, _), plain in zip(packed.index, opened, strict=True)]
    return PackedRecords(b"[" + b",".join(opened) + b"]", index)


def is_crc(check: str) -> bool:
    """Whether a record's checksum is one (not the store's own finding: a file it could not read)."""
    return len(check) == 8 and all(c in "0123456789abcdef" for c in check)


def refused(record: StoredRecord, reason: str) -> StoredRecord:
    return StoredRecord(record.seq, record.body, REFUSED + reason)
