"""The file store's reads of save records: the segment files whole, then the loose record files
newer than them, handed to the loader as one buffer (``read_packed``) or one by one. Reads take
the run's shared lock; nothing here writes. ``FileStore`` (``files.py``) mixes it in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..codec import MAX_RECORD_BYTES, PackedRecords, StoredRecord
from ._file_format import (
    HEADER_CAP,
    UNREADABLE,
    Piece,
    RawRecord,
    parse_segment,
    record_name,
    record_parts,
    record_seqs,
    segment_name,
    segment_spans,
    split_piece,
)
from ._file_runs import RunDirectories


class RecordReads(RunDirectories):
    """``records_after``, ``read_raw_records``, ``read_packed`` and ``snapshot_seq`` of a file store."""

    if TYPE_CHECKING:

        def _not_found(self, run_id: str) -> Exception: ...  # Store's

    def _read_record(self, path: Path, seq: int) -> RawRecord:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_RECORD_BYTES + HEADER_CAP:
                return seq, f"{UNREADABLE}: file is {size} bytes, over the cap", b"", False
            data = handle.read()
        return record_parts(seq, data)

    def _pieces(self, run_dir: Path, after_seq: int) -> list[Piece]:
        """The run's records that may have seq > ``after_seq``, as read: each segment file whole,
        then each loose record file newer than the segments (a record both packed and loose,
        left by an interrupted pack, is read from its segment)."""
        records = run_dir / "records"
        pieces: list[Piece] = []
        packed_upto = 0
        for first, last in segment_spans(records):
            packed_upto = max(packed_upto, last)
            if last > after_seq:
                with open(records / segment_name(first, last), "rb") as handle:
                    pieces.append(parse_segment(first, last, handle.read()))
        for seq in record_seqs(records):
            if seq <= packed_upto or seq <= after_seq:
                continue
            try:
                seq, check, body, snapshot = self._read_record(records / record_name(seq), seq)
            except FileNotFoundError:
                seq, check, body, snapshot = seq, f"{UNREADABLE}: record file vanished", b"", False
            pieces.append(([(seq, check, len(body))], [seq] if snapshot else [], memoryview(body)))
        return pieces

    def _raw(self, run_id: str, after_seq: int = 0) -> list[RawRecord]:
        """The run's records with seq > ``after_seq``, in order; a gap comes back as a damaged
        record at the first missing seq, never skipped."""
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            pieces = self._pieces(run_dir, after_seq) if run_dir is not None else []
        result: list[RawRecord] = []
        for record in (r for piece in pieces for r in split_piece(piece) if r[0] > after_seq):
            if result and record[0] <= result[-1][0]:
                continue
            if result and record[0] != result[-1][0] + 1:
                result.append((result[-1][0] + 1, f"{UNREADABLE}: record file is missing", b"", False))
            result.append(record)
        return result

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        return [StoredRecord(s, b.decode("utf-8", errors="replace"), c) for s, c, b, _ in self._raw(run_id, after_seq)]

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        records = [StoredRecord(seq, body, check) for seq, check, body, _ in self._raw(run_id)]
        if not records:
            raise self._not_found(run_id)
        return records

    def read_packed(self, run_id: str) -> PackedRecords | None:
        """Every body in one buffer, joining whole segments (no per-record copy). A gap, an
        overlap or damage makes the codec's check fail and it reads ``read_raw_records``."""
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            pieces = self._pieces(run_dir, 0) if run_dir is not None else []
        if not pieces:
            return None
        index: list[tuple[int, str, int]] = []
        parts: list[bytes | memoryview] = [b"["]
        for rows, _, bodies in pieces:
            index += rows
            parts += (bodies, b",")
        parts[-1] = b"]"
        return PackedRecords(b"".join(parts), index)  # one copy of the bodies, not three

    def snapshot_seq(self, run_id: str) -> int:
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            pieces = self._pieces(run_dir, 0) if run_dir is not None else []
        return max((seq for _, snapshots, _ in pieces for seq in snapshots), default=0)
