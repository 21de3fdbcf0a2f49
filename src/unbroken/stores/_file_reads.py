"""The file store's reads of save records: the segment files whole, then the loose record files
newer than them, handed to the loader one by one (``iter_raw_records``: measured faster than
joining every body into one buffer for one parse, which also held the bytes twice). Reads take
the run's shared lock; nothing here writes. ``FileStore`` (``files.py``) mixes it in."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..codec import MAX_RECORD_BYTES, StoredRecord, loads
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
    """``records_after``, ``read_raw_records``, ``iter_raw_records``, ``records_between`` and
    ``snapshot_seq`` of a file store."""

    def _read_record(self, path: Path, seq: int) -> RawRecord:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_RECORD_BYTES + HEADER_CAP:
                return seq, f"{UNREADABLE}: file is {size} bytes, over the cap", b"", False
            data = handle.read()
        return record_parts(seq, data)

    def _pieces(self, run_dir: Path, after_seq: int, upto_seq: int | None = None) -> list[Piece]:
        """The run's records that may have ``after_seq`` < seq (<= ``upto_seq``), as read: each
        segment file that overlaps whole, then each loose record file newer than the segments (a
        record both packed and loose, left by an interrupted pack, is read from its segment)."""
        return list(self._iter_pieces(run_dir, after_seq, upto_seq))

    def _iter_pieces(self, run_dir: Path, after_seq: int, upto_seq: int | None = None) -> Iterator[Piece]:
        """``_pieces`` one at a time, each file read when its turn comes (the directory is listed
        first; the caller holds the run's lock until the last)."""
        records = run_dir / "records"
        spans = segment_spans(records)
        seqs = record_seqs(records)
        packed_upto = max((last for _, last in spans), default=0)
        for first, last in spans:
            if last > after_seq and (upto_seq is None or first <= upto_seq):
                yield parse_segment(first, last, _read_whole(records / segment_name(first, last)))
        for seq in seqs:
            if seq <= packed_upto or seq <= after_seq or (upto_seq is not None and seq > upto_seq):
                continue
            try:
                seq, check, body, snapshot = self._read_record(records / record_name(seq), seq)
            except FileNotFoundError:
                seq, check, body, snapshot = seq, f"{UNREADABLE}: record file vanished", b"", False
            yield [(seq, check, len(body))], [seq] if snapshot else [], memoryview(body)

    def _raw(self, run_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[RawRecord]:
        """The run's records with seq > ``after_seq`` (and <= ``upto_seq``), in order; a gap
        comes back as a damaged record at the first missing seq, never skipped."""
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            pieces = self._pieces(run_dir, after_seq, upto_seq) if run_dir is not None else []
        top = upto_seq if upto_seq is not None else float("inf")
        result: list[RawRecord] = []
        for record in (r for piece in pieces for r in split_piece(piece) if after_seq < r[0] <= top):
            if result and record[0] <= result[-1][0]:
                continue
            if result and record[0] != result[-1][0] + 1:
                result.append((result[-1][0] + 1, f"{UNREADABLE}: record file is missing", b"", False))
            result.append(record)
        return result

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        return [StoredRecord(s, b.decode("utf-8", errors="replace"), c) for s, c, b, _ in self._raw(run_id, after_seq)]

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        return [StoredRecord(seq, body, check) for seq, check, body, _ in self._raw(run_id)]

    def iter_raw_records(self, run_id: str) -> Iterator[StoredRecord]:
        """The records as ``read_raw_records`` gives them, for the loader. Under the run's
        shared lock, each file is read (one read call) and its records cut out (one copy of each
        body) before the next is read, so its bytes are let go and their memory serves the next
        file (fresh pages cost as much as the copy); the lock is let go before the first record
        is handed over, so a save of a live run waits for the reads, never for the parse.
        Yields nothing for no run."""
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            pieces = [_stored(piece) for piece in self._iter_pieces(run_dir, 0)] if run_dir is not None else []
        pieces.reverse()
        last = 0
        while pieces:
            records = pieces.pop()  # a piece's seqs are consecutive (a segment's, or one file's)
            if last and records and records[0].seq <= last:
                records = [record for record in records if record.seq > last]  # an interrupted pack's
            if not records:
                continue
            if last and records[0].seq != last + 1:
                yield StoredRecord(last + 1, b"", f"{UNREADABLE}: record file is missing")
            yield from records
            last = records[-1].seq

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        # Bounded: only the segment files overlapping the range and the loose files inside it
        # are opened (the directory listing names them all).
        records = self._raw(run_id, after_seq, upto_seq)
        return [StoredRecord(s, b.decode("utf-8", errors="replace"), c) for s, c, b, _ in records]

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        """Newest first, only the header line of each loose record file (its snapshot flag)
        and only the index line of each segment file (its list of snapshots), back to the
        first snapshot at or before ``upto_seq``: about ``snapshot_every`` headers, no body."""
        top = upto_seq if upto_seq is not None else float("inf")
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            if run_dir is None:
                return 0
            records = run_dir / "records"
            spans = segment_spans(records)
            packed_upto = max((last for _, last in spans), default=0)
            for seq in reversed(record_seqs(records)):
                if packed_upto < seq <= top and self._flagged(records / record_name(seq), seq):
                    return seq
            for first, last in reversed(spans):
                if first <= top:
                    found = [seq for seq in self._segment_snapshots(records, first, last) if seq <= top]
                    if found:
                        return max(found)
        return 0

    @staticmethod
    def _flagged(path: Path, seq: int) -> bool:
        """Whether the record file's header says it is a snapshot (a damaged or vanished one is not)."""
        try:
            with open(path, "rb") as handle:
                header = loads(handle.readline(HEADER_CAP))
        except (FileNotFoundError, ValueError):
            return False
        return isinstance(header, dict) and header.get("seq") == seq and header.get("snapshot") is True

    @staticmethod
    def _segment_snapshots(records: Path, first: int, last: int) -> list[int]:
        """The snapshot seqs a segment file's index line lists (the whole file if that line is
        over the header cap; none if it is damaged)."""
        with open(records / segment_name(first, last), "rb") as handle:
            line = handle.readline(HEADER_CAP)
            if not line.endswith(b"\n"):
                line += handle.read()
        return parse_segment(first, last, line)[1]


def _stored(piece: Piece) -> list[StoredRecord]:
    """``split_piece`` as the loader takes them."""
    index, _, bodies = piece
    records, offset = [], 0
    for seq, check, length in index:
        end = offset + length
        records.append(StoredRecord(seq, bytes(bodies[offset:end]), check))
        offset = end + 1
    return records


def _read_whole(path: Path) -> bytes:
    """The file's bytes, in one read call when it does not change meanwhile (the file object's
    read() takes a few more system calls: seek, a second read to see the end)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) == size:
            return data
        parts = [data]
        while part := os.read(fd, max(size, 1 << 16)):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(fd)
