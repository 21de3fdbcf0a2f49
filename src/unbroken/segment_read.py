"""The fast read of a packed segment, for the whole-state loader only.

A segment (``codec.Segment``) holds records that passed every record check when they were
packed, under a seal over all their bytes (``seal``). When the seal holds, nothing in them has changed
since, so the loader does not need each record's own checksum, nor the small fields of records
older than the run's newest snapshot (they are replaced by it). The seal is bound to the run (``_sealed``): a
segment copied from another run goes to the careful read. ``records_of`` parses a
segment in one call (``acceptance.accept_segment``: msgspec, typed by the same
``RECORD_SHAPE`` every record is accepted by), which keeps each record's ``fields`` as its raw
JSON text, parsed later only if the fold needs it. Anything unusual (a broken seal, a record that does not match,
another version) gives None: the caller then reads the segment record by record, the careful
path that names what is wrong. msgspec and xxhash are imported on first use, so ``import
unbroken`` does not pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .acceptance import RunRecords, accept_segment, intact_run, loads

if TYPE_CHECKING:
    from .codec import Segment


def seal(index_text: bytes, bodies: bytes, seed: int = 0) -> str:
    """A segment's seal: XXH3-64 (xxhash) from ``seed`` (its run's ``acceptance.run_seed``; 0
    for segments packed before they were bound to their run) of its index text followed by its
    bodies, as 16 lowercase hex digits. (A hash, not CRC-32: it checks the 28 MB of a
    10,000-turn run's segments in ~3 ms instead of ~12, and misses a random change once in 2^64.)"""
    import xxhash  # (imported when a run has segments, like msgspec)

    digest = xxhash.xxh3_64(index_text, seed)
    digest.update(bodies)
    return str(digest.hexdigest())


def _sealed(segment: Segment, run: RunRecords) -> bool:
    """Whether ``segment``'s seal holds under ``run``'s rule: bound to the run (packed since
    segments were bound: it holds this run's records, of either rule), or unbound while the run
    has shown no bound record (packed before). The seal stands for its records' checksums, so
    ``run`` learns from the last one whether the records after it must be bound."""
    if seal(segment.index_text, segment.bodies, run.seed) == segment.seal:
        _learn_from_last(segment, run)
        return True
    return run.plain and bool(run.seed) and seal(segment.index_text, segment.bodies) == segment.seal


def _learn_from_last(segment: Segment, run: RunRecords) -> None:
    """Mark ``run`` bound when the segment's last record is (one record's CRC, not the segment's)."""
    try:
        index = loads(segment.index_text)
        check, length = index["checksums"][-1], index["lengths"][-1]
    except (ValueError, TypeError, KeyError, IndexError):
        return
    if type(check) is str and type(length) is int and 0 <= length < len(segment.bodies) - 1:
        run.matches(memoryview(segment.bodies)[-1 - length : -1], check)


def records_of(segment: Segment, first_seq: int | None, current: int, run: RunRecords) -> list[Any] | None:
    """The records of ``segment`` as typed objects (attributes ``v``, ``seq``, ``msg_start``,
    ``messages``, ``snapshot``, and ``fields`` as raw JSON text), if its seal holds, it starts at
    ``first_seq`` (when given), its records are its seqs in order, and all are at one schema
    version from 2 to ``current``; None otherwise."""
    if first_seq is not None and segment.first != first_seq:
        return None
    if not _sealed(segment, run):
        return None
    records = accept_segment(segment.bodies)
    if records is None or len(records) != segment.last - segment.first + 1:
        return None
    seq, version = segment.first, records[0].v if records else 0
    # Version 1 records differ in meaning (``snapshot`` required, ``save_seq`` kept): the careful
    # path folds them, and a segment of several versions (a run resumed by a newer unbroken).
    if not 2 <= version <= current:
        return None
    for record in records:
        if record.seq != seq or record.v != version:
            return None
        seq += 1
    return records


def dicts_of(segment: Segment, first_seq: int | None, current: int, run: RunRecords) -> list[dict[str, Any]] | None:
    """The records of ``segment`` parsed in one orjson call, as the dicts ``acceptance.accept``
    gives, if its seal holds, it starts at ``first_seq`` (when given), its records are its seqs
    in order, each of the shape ``RECORD_SHAPE`` says, and all are at one schema version from 2
    to ``current`` (as ``records_of``); None otherwise. For a run too short to repay msgspec's
    import (``Store.sealed_read_from``): the seal stands for each record's checksum, and one
    parse replaces one per record (with its copy of the body)."""
    if first_seq is not None and segment.first != first_seq:
        return None
    if not _sealed(segment, run):
        return None
    try:
        values = loads(segment.bodies)
    except (ValueError, RecursionError):
        return None
    if type(values) is not list or len(values) != segment.last - segment.first + 1:
        return None
    version = values[0].get("v") if values and type(values[0]) is dict else None
    if type(version) is not int or not 2 <= version <= current:
        return None  # (version 1 differs in meaning: the careful path folds it, as in records_of)
    return values if intact_run(values, segment.first, version) else None
