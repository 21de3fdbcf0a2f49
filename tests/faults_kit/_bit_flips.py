"""Damaged save records: a stored record with random bits flipped."""

from __future__ import annotations

import random

from unbroken.codec import StoredRecord


def flip_bits(record: StoredRecord, rng: random.Random, count: int) -> StoredRecord:
    """``record`` with ``count`` distinct random bits flipped in its body (or, one time in ten,
    its stored checksum); invalid UTF-8 is read back with replacement characters, as stores do."""
    target = record.checksum if rng.random() < 0.1 else record.body
    data = bytearray(target.encode() if isinstance(target, str) else target)
    for bit in rng.sample(range(len(data) * 8), min(count, len(data) * 8)):
        data[bit // 8] ^= 1 << (bit % 8)
    damaged = data.decode("utf-8", errors="replace")
    if target is record.checksum:
        return StoredRecord(record.seq, record.body, damaged)
    return StoredRecord(record.seq, damaged, record.checksum)
