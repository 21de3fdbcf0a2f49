"""The SQLite store's segments: older save records packed into one row (store schema 4).

A resume reads a long run in a few dozen big rows instead of one row per save: reading 20,001
rows (each an index lookup and a table lookup) cost about as much as parsing them, and a
packed segment is read by the loader in one parse (``segment_read``). The most recent
``keep_recent`` saves of a run always stay one row each in ``unbroken_records``, as written.

Packing runs in its own write transaction right after a save (every ``keep_recent`` saves,
once more than ``keep_recent + pack_batch`` records are loose): it reads the oldest loose
records, checks each (``codec.pack_records``: a damaged record and everything after it stay
loose, reported as themselves), inserts the segment row and deletes the rows it holds. Either
all of that commits or none of it, so a record is always in exactly one of the two tables.
Every function here takes the connection of a transaction the caller holds.
"""

from __future__ import annotations

import sqlite3

from .. import crashpoints
from ..codec import Segment, StoredRecord, pack_records
from .backend import SegmentSealer

COLUMNS = "first_seq, last_seq, idx, seal, bodies"
"""A segment row's columns, in the order ``Segment`` takes them (the run id aside)."""


def _segment(row: tuple[int, int, bytes, str, bytes]) -> Segment:
    first, last, idx, seal, bodies = row
    return Segment(first, last, bytes(idx), bytes(bodies), seal)


MAX_SEQ = 2**32 - 1
"""The largest seq a run can hold: a record's key is run_no * 2^32 + seq (store schema 8)."""
RUN_RECORDS = (
    "unbroken_runs u JOIN unbroken_records r ON r.key > u.run_no * 4294967296 + ? "
    "AND r.key <= u.run_no * 4294967296 + ? WHERE u.run_id = ?"
)
"""The loose records of one run with ``after`` < seq <= ``upto`` (parameters ``after, upto,
run_id``, each 0 to ``MAX_SEQ``): the run's row by its key, then one range search on the
records' integer key (store schema 8: key = run_no * 2^32 + seq)."""


def records_base(conn: sqlite3.Connection, run_id: str) -> int | None:
    """run_no * 2^32 for the run (its records' keys are this + seq); None: no numbered run."""
    row = conn.execute("SELECT run_no FROM unbroken_runs WHERE run_id=?", (run_id,)).fetchone()
    return int(row[0]) << 32 if row is not None and row[0] > 0 else None


def lowest_loose(conn: sqlite3.Connection, run_id: str, base: int | None = None) -> int | None:
    """The seq of the run's oldest loose record (None: none), one probe of the integer key."""
    base = records_base(conn, run_id) if base is None else base
    if base is None:
        return None
    (low,) = conn.execute(
        "SELECT min(key) FROM unbroken_records WHERE key > ? AND key <= ?", (base, base + MAX_SEQ)
    ).fetchone()
    return None if low is None else int(low) - base


MAX_SEGMENTS_A_PACK = 4
"""Segments one pack makes at most: a run that a store schema 3 file holds unpacked (or one saved
while packing failed) is caught up a few segments every ``keep_recent`` saves, never in one
long transaction."""


def pack(
    conn: sqlite3.Connection,
    run_id: str,
    head_seq: int,
    keep_recent: int,
    pack_batch: int,
    sealer: SegmentSealer | None = None,
) -> int:
    """Pack the oldest loose records of the run, ``pack_batch`` to a segment, while more than
    ``keep_recent`` would stay loose after the run's save ``head_seq`` (at most
    ``MAX_SEGMENTS_A_PACK`` segments); ``sealer`` (an encrypted store's) seals each segment as one
    unit where it can. Returns how many records were packed."""
    packed = 0
    base = records_base(conn, run_id)
    if base is None:
        return packed
    for _ in range(MAX_SEGMENTS_A_PACK):
        low = lowest_loose(conn, run_id, base)
        if low is None or low + pack_batch - 1 > head_seq - keep_recent:
            return packed
        rows = conn.execute(
            "SELECT seq, CAST(body AS BLOB), checksum FROM unbroken_records WHERE key >= ? AND key < ? ORDER BY key",
            (base + low, base + low + pack_batch),
        ).fetchall()
        result = pack_records(run_id, [StoredRecord(seq, body, check) for seq, body, check in rows])
        if result is None:
            return packed  # the oldest loose record is damaged: it stays as it is, and so does the rest
        segment, _ = result
        if sealer is not None:
            segment = sealer.seal_segment(run_id, segment) or segment
        conn.execute(
            f"INSERT INTO unbroken_segments (run_id, {COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, segment.first, segment.last, segment.index_text, segment.seal, segment.bodies),
        )
        crashpoints.hit("sqlite.pack.segment_written")  # (a kill here rolls the whole pack back)
        conn.execute(
            "DELETE FROM unbroken_records WHERE key >= ? AND key <= ?", (base + segment.first, base + segment.last)
        )
        packed += segment.last - segment.first + 1
        if segment.last - segment.first + 1 < len(rows) or len(rows) < pack_batch:
            return packed  # stopped at a damaged record or a gap: what follows stays loose
    return packed


def segments_from(conn: sqlite3.Connection, run_id: str, after_seq: int = 0) -> list[Segment]:
    """The run's segments holding a record after ``after_seq``, in order (all: ``after_seq`` 0)."""
    return segments_between(conn, run_id, after_seq, None)


def segments_between(conn: sqlite3.Connection, run_id: str, after_seq: int, upto_seq: int | None) -> list[Segment]:
    """The run's segments holding a record with ``after_seq`` < seq (<= ``upto_seq``), in order.
    Bounded: two range searches on the (run_id, first_seq) key, never a scan of older segments."""
    found: list[Segment] = []
    if after_seq > 0:  # the segment that holds record after_seq + 1, if one does
        row = conn.execute(
            f"SELECT {COLUMNS} FROM unbroken_segments WHERE run_id=? AND first_seq<=? ORDER BY first_seq DESC LIMIT 1",
            (run_id, after_seq + 1),
        ).fetchone()
        if row is not None and row[1] > after_seq and (upto_seq is None or row[0] <= upto_seq):
            found.append(_segment(row))
    low = after_seq + 1 if after_seq > 0 else 0
    if upto_seq is None:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM unbroken_segments WHERE run_id=? AND first_seq>? ORDER BY first_seq",
            (run_id, low),
        )
    else:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM unbroken_segments WHERE run_id=? AND first_seq>? AND first_seq<=? "
            "ORDER BY first_seq",
            (run_id, low, upto_seq),
        )
    found.extend(_segment(row) for row in rows)
    return found


def newest_snapshot(conn: sqlite3.Connection, run_id: str, upto_seq: int) -> int:
    """The newest snapshot at or before ``upto_seq`` among the run's segments (0: none), reading
    the index of one segment at a time, newest first."""
    top = upto_seq
    while top > 0:
        row = conn.execute(
            "SELECT first_seq, last_seq, idx FROM unbroken_segments WHERE run_id=? AND first_seq<=? "
            "ORDER BY first_seq DESC LIMIT 1",
            (run_id, top),
        ).fetchone()
        if row is None:
            return 0
        first, last, idx = row
        found = [seq for seq in Segment(first, last, bytes(idx), b"", "").snapshots() if seq <= upto_seq]
        if found:
            return max(found)
        top = first - 1
    return 0


def expanded(
    segments: list[Segment], after_seq: int = 0, upto_seq: int | None = None, *, text: bool = False
) -> list[StoredRecord]:
    """The records of ``segments`` one by one, those with ``after_seq`` < seq (<= ``upto_seq``);
    ``text``: bodies as str, as ``unbroken_records`` gives them (invalid UTF-8, which no intact
    record holds, is replaced, so its checksum fails)."""
    top = upto_seq if upto_seq is not None else float("inf")
    records = [record for segment in segments for record in segment.records() if after_seq < record.seq <= top]
    if text:
        for record in records:
            if type(record.body) is bytes:
                record.body = record.body.decode("utf-8", errors="replace")
    return records
