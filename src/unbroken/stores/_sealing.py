"""Sealing and opening one run's records, ledger results and task under its opened data key
(``stores.encrypted``; the formats are ``encryption._cipher``'s)."""

from __future__ import annotations

from dataclasses import replace

import orjson

from ..acceptance import REFUSED, checksum, run_seed
from ..codec import (
    SEALED_SEGMENT,
    EncodedSave,
    PackedRecords,
    Segment,
    StoredRecord,
    loads,
    segment_index,
    segment_seal,
)
from ..encryption._cipher import DecryptFailed, RunCipher, is_sealed_record
from ..state import LedgerEntry
from ._data_keys import DATA_KEY, KeyRecord


class OpenedRun:
    """A run's data key, opened: its cipher, where sealing started (records; whether ledger
    results in clear may be there), the sealed task (reused)."""

    __slots__ = ("cipher", "from_seq", "kid", "plain_entries", "seed", "task")

    def __init__(self, run_id: str, cipher: RunCipher, record: KeyRecord) -> None:
        self.cipher, self.from_seq, self.kid = cipher, record.from_seq, record.kid
        self.seed = run_seed(run_id)
        """An opened record's checksum is bound to the run (``acceptance.run_seed``), as a
        plaintext record's is: its associated data already binds it, so it never counts as
        copied, and a run encrypted from a later save reads as one run-bound run."""
        self.plain_entries = record.plain_entries
        self.task: tuple[str, str] | None = None  # (plain, sealed)


def seal_save(run: OpenedRun, save: EncodedSave, *, raw: bool = False) -> EncodedSave:
    """``save`` with its body (as raw bytes if ``raw``, else as text), its summary's task and its
    ledger results sealed."""
    assert isinstance(save.body, str)  # (the encoder's text: only a sealed record is bytes)
    seal_record = run.cipher.seal_record_raw if raw else run.cipher.seal_record
    body = seal_record(save.seq, save.body, save.snapshot)
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
    return StoredRecord(record.seq, plain.decode() if text else plain, checksum(plain, run.seed))


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
        StoredRecord(seq, plain.decode() if text else plain, checksum(plain, run.seed))
        for (seq, _, _), plain in zip(index, opened, strict=True)
    ]


def seal_segment(run: OpenedRun, segment: Segment) -> Segment | None:
    """``segment`` (a store's pack of this run's sealed records) sealed as one unit instead: each
    record opened first (bound to its seq: one moved or edited is never sealed anew), then the
    plaintext segment's index and bodies sealed together. Its clear index keeps what a reader
    without the key needs (first seq, snapshots) and the sealed index's size. None when one does
    not open, or is plaintext (a run sealed from a later save): the store packs it as it is."""
    index = segment_index(segment.index_text, segment.first, segment.last, len(segment.bodies))
    if index is None or segment.first < run.from_seq:
        return None
    opened = run.cipher.open_bodies(segment.bodies, [(seq, length) for seq, _, length in index])
    if opened is None:
        return None
    return seal_bodies(run, segment.first, opened, [checksum(body, run.seed) for body in opened], segment.snapshots())


def seal_bodies(run: OpenedRun, first: int, bodies: list[bytes], checksums: list[str], snapshots: list[int]) -> Segment:
    """Records ``first..`` (``bodies``, their ``checksums``) sealed as one segment: the plaintext
    segment's index then its bodies, under a clear index of what a reader without the key needs."""
    last = first + len(bodies) - 1
    lengths = [len(body) for body in bodies]
    inner = orjson.dumps({"first": first, "checksums": checksums, "lengths": lengths, "snapshots": snapshots})
    clear = orjson.dumps({"first": first, "snapshots": snapshots, "sealed": SEALED_SEGMENT, "index_bytes": len(inner)})
    sealed = run.cipher.seal_segment(first, last, clear, inner + b"[" + b",".join(bodies) + b"]")
    return Segment(first, last, clear, sealed, segment_seal(clear, sealed))


def open_sealed_records(run: OpenedRun, segment: Segment, text: bool) -> list[StoredRecord] | str:
    """The records of a segment sealed as one unit (``seal_segment``), each with its checksum
    from the sealed index (judged by the loader as a plaintext segment's records are), or why it
    does not open. Sliced out of the one decrypted buffer (no copy of the segment's bodies)."""
    opened = _open_unit(run, segment)
    if isinstance(opened, str):
        return opened
    plain, size = opened
    index = segment_index(plain[:size], segment.first, segment.last, len(plain) - size)
    if index is None:  # (sealed so by a writer with the key, not by unbroken)
        return "its segment's sealed index does not read or does not fit its bodies"
    view, offset, records = memoryview(plain), size + 1, []
    # A unit sealed before records were bound to their run holds plain CRC-32s: it opened, so its
    # records are the run's, and they get bound checksums (records opened on their own do too).
    rebind = bool(index) and index[0][1] != checksum(view[offset : offset + index[0][2]], run.seed)
    for seq, check, length in index:
        part = view[offset : offset + length]
        if rebind:
            check = checksum(part, run.seed)
        records.append(StoredRecord(seq, str(part, "utf-8", "replace") if text else bytes(part), check))
        offset += length + 1
    return records


def open_sealed_segment(run: OpenedRun, segment: Segment) -> Segment | str:
    """The plaintext segment inside a segment sealed as one unit, or why it does not open."""
    opened = _open_unit(run, segment)
    if isinstance(opened, str):
        return opened
    plain, size = opened
    return Segment(segment.first, segment.last, plain[:size], plain[size:], "")


def _open_unit(run: OpenedRun, segment: Segment) -> tuple[bytes, int] | str:
    """A sealed segment's plaintext and the size of the index it starts with, or why it does not
    open. Its clear index is sealed with it (associated data): once it opens, it is as written."""
    try:
        plain = run.cipher.open_segment(segment.first, segment.last, segment.index_text, segment.bodies)
    except DecryptFailed as exc:
        if segment_seal(segment.index_text, segment.bodies) != segment.seal:
            return "its segment does not match its seal (torn or edited as stored)"
        return f"its segment does not decrypt ({exc}): moved from another run or position, or edited"
    try:
        size = loads(segment.index_text)["index_bytes"]
    except (ValueError, TypeError, KeyError):
        size = None
    if type(size) is not int or not 0 < size < len(plain):  # (sealed so by a writer with the key, not unbroken)
        return "its segment's index does not read"
    return plain, size


def open_packed(run: OpenedRun, packed: PackedRecords) -> PackedRecords | None:
    """A store's packed read of sealed records, opened in one loop; None unless all open."""
    opened = run.cipher.open_bodies(packed.buffer, [(seq, length) for seq, _, length in packed.index])
    if opened is None:
        return None
    index = [
        (seq, checksum(plain, run.seed), len(plain)) for (seq, _, _), plain in zip(packed.index, opened, strict=True)
    ]
    return PackedRecords(b"[" + b",".join(opened) + b"]", index)


def is_crc(check: str) -> bool:
    """Whether a record's checksum is one (not the store's own finding: a file it could not read)."""
    return len(check) == 8 and all(c in "0123456789abcdef" for c in check)


def refused(record: StoredRecord, reason: str) -> StoredRecord:
    return StoredRecord(record.seq, record.body, REFUSED + reason)
