"""The fast read of a packed segment, for the whole-state loader only.

A segment (``codec.Segment``) holds records that passed every record check when they were
packed, under a seal over all their bytes. When the seal holds, nothing in them has changed
since, so the loader does not need each record's own checksum, nor the small fields of records
older than the run's newest snapshot (they are replaced by it). ``records_of`` parses a
segment in one call with msgspec, typed as the shape check of ``codec.validate_record``
requires it (``v``, ``seq`` and ``msg_start`` integers, ``messages`` a list, ``snapshot`` a
boolean when present), and keeps each record's ``fields`` as its raw JSON text, parsed later
only if the fold needs it. Anything unusual (a broken seal, a record that does not match,
another version) gives None: the caller then reads the segment record by record, the careful
path that names what is wrong. msgspec is imported on first use, so ``import unbroken`` does not
pay for it.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .codec import Segment

_decoder: Any = None


def _build() -> Any:
    global _decoder
    import msgspec

    # defstruct, not a class body: this module's annotations are strings, msgspec needs types.
    packed_record = msgspec.defstruct(
        "PackedRecord",
        [
            ("v", int),
            ("seq", int),
            ("msg_start", int),
            ("messages", list),
            ("fields", msgspec.Raw),
            ("snapshot", bool, False),
        ],
    )
    _decoder = msgspec.json.Decoder(list[packed_record])  # type: ignore[valid-type]
    return _decoder


def records_of(segment: Segment, first_seq: int | None, current: int) -> list[Any] | None:
    """The records of ``segment`` as typed objects (attributes ``v``, ``seq``, ``msg_start``,
    ``messages``, ``snapshot``, and ``fields`` as raw JSON text), if its seal holds, it starts at
    ``first_seq`` (when given), its records are its seqs in order, and all are at one schema
    version from 2 to ``current``; None otherwise."""
    if first_seq is not None and segment.first != first_seq:
        return None
    if f"{zlib.crc32(segment.bodies, zlib.crc32(segment.index_text)):08x}" != segment.seal:
        return None
    decoder = _decoder if _decoder is not None else _build()
    try:
        records: list[Any] = decoder.decode(segment.bodies)
    except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
        return None
    if len(records) != segment.last - segment.first + 1:
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
