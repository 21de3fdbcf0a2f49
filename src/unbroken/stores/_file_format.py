"""The files of a file store: their names and what each one holds (see ``files.py`` for the layout).

Pure formats plus plain reads; locking, atomic writes and fsyncs live in ``files.py`` and
``_durable.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ..codec import MAX_RECORD_BYTES, EncodedSave, dumps, loads
from ..errors import CorruptCheckpoint
from ..state import LedgerEntry, RunSummary
from .backend import SealedEntry
from .base import next_fence

STORE_SCHEMA = 1
MARKER = "unbroken-store.json"
UNREADABLE = "unreadable"
"""The checksum given to a record file that cannot be parsed, so the codec reports it as damaged."""

HEADER_CAP = 1024 * 1024  # the header line (mostly the run's task) on top of the body cap
_HEADER_TASK_CHARS = 64 * 1024
_RECORD_FILE = re.compile(r"^(\d{12})\.json$")
_HEAD_FILE = re.compile(r"^HEAD-\d{12}$")
_SEGMENT_FILE = re.compile(r"^segment-(\d{12})-(\d{12})\.json$")
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")


def record_name(seq: int) -> str:
    return f"{seq:012d}.json"


def effect_name(key: str) -> str:
    # Idempotency keys are safe file names; anything else is hashed (``~`` cannot start a safe key).
    if _SAFE_KEY.match(key):
        return f"{key}.json"
    return f"~{hashlib.sha256(key.encode()).hexdigest()}.json"


def pretty(value: Any) -> bytes:
    """``value`` as indented JSON, for the files a person may open (marker, ledger, lease)."""
    return (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def head_name(seq: int) -> str:
    """The empty file whose name records the run's head seq (moved by rename with each save), so
    a deleted last record is seen as missing rather than taken for an older head."""
    return f"HEAD-{seq:012d}"


def head_markers(records: Path) -> list[int]:
    """The seqs named by head markers in ``records`` (normally one; none in stores made before)."""
    return sorted(int(name[5:]) for name in os.listdir(records) if _HEAD_FILE.match(name))


def record_seqs(records: Path) -> list[int]:
    """The seqs of the record files in ``records``, ascending (temp files are not records)."""
    seqs = []
    for name in os.listdir(records):
        match = _RECORD_FILE.match(name)
        if match:
            seqs.append(int(match.group(1)))
    seqs.sort()
    return seqs


def segment_name(first: int, last: int) -> str:
    return f"segment-{first:012d}-{last:012d}.json"


def segment_spans(records: Path) -> list[tuple[int, int]]:
    """The (first, last) seqs of the segment files in ``records``, ascending."""
    spans = []
    for name in os.listdir(records):
        match = _SEGMENT_FILE.match(name)
        if match:
            spans.append((int(match.group(1)), int(match.group(2))))
    spans.sort()
    return spans


# --------------------------------------------------------------------------- record files


def record_bytes(save: EncodedSave) -> bytes:
    """A record file: a JSON header line (with the run summary ``list_runs`` shows), then the body."""
    body = save.body_bytes()
    summary: dict[str, Any] = {
        "task": save.summary.task,
        "phase": save.summary.phase,
        "turns": save.summary.turns,
        "tokens_used": save.summary.tokens_used,
        "save_seq": save.summary.save_seq,
        "updated_at": save.summary.updated_at,
    }
    if len(save.summary.task) > _HEADER_TASK_CHARS:
        summary["task"] = save.summary.task[:_HEADER_TASK_CHARS]  # list_runs only; the body has it all
    header = {
        "seq": save.seq,
        "checksum": save.checksum,
        "label": save.label,
        "snapshot": save.snapshot,
        "bytes": len(body),
        "summary": summary,
    }
    return dumps(header).encode() + b"\n" + body + b"\n"


RawRecord = tuple[int, str, bytes, bool]
"""A record as the file store reads it: seq, checksum, body bytes, whether it is a snapshot."""


def record_parts(seq: int, data: bytes) -> RawRecord:
    """(seq, checksum, body bytes, snapshot) of a record file's bytes; damage gives a checksum
    that fails (``UNREADABLE``), so the codec reports the record at its seq."""
    head, _, rest = data.partition(b"\n")
    try:
        header = json.loads(head)
    except (ValueError, RecursionError):
        return seq, UNREADABLE, b"", False
    if not isinstance(header, dict) or header.get("seq") != seq or not isinstance(header.get("checksum"), str):
        return seq, UNREADABLE, b"", False
    return seq, header["checksum"], rest[:-1] if rest.endswith(b"\n") else rest, header.get("snapshot") is True


def segment_bytes(records: list[RawRecord]) -> bytes:
    """A segment file: records packed by the file store once they are no longer recent. Line one
    is its index, ``{"segment": {"first": SEQ, "checksums": [...], "lengths": [...], "snapshots":
    [SEQ, ...]}}``; line two is the JSON array of the record bodies, each exactly as its record
    file held it (``jq`` reads either line)."""
    index = {
        "first": records[0][0],
        "checksums": [check for _, check, _, _ in records],
        "lengths": [len(body) for _, _, body, _ in records],
        "snapshots": [seq for seq, _, _, snapshot in records if snapshot],
    }
    bodies = b",".join(body for _, _, body, _ in records)
    return dumps({"segment": index}).encode() + b"\n[" + bodies + b"]\n"


Piece = tuple[list[tuple[int, str, int]], list[int], memoryview]
"""Records read together: (seq, checksum, length) each, the seqs of the snapshots among them,
and their bodies joined by commas (one record file: its body alone), as a view of the bytes read."""


def parse_segment(first: int, last: int, data: bytes) -> Piece:
    """The records of a segment file. A damaged index gives its seqs as unreadable records; a
    damaged body fails its own checksum."""
    view = memoryview(data)
    end = data.find(b"\n")
    try:
        meta = loads(view[:end] if end >= 0 else data)["segment"]
        checks, lengths, snapshots = meta["checksums"], meta["lengths"], meta["snapshots"]
        if meta["first"] != first or not len(checks) == len(lengths) == last - first + 1:
            raise ValueError("the index does not match the file name")
        if not all(type(n) is int for n in lengths) or not all(type(c) is str for c in checks):
            raise ValueError("the index holds values of the wrong type")
        index = list(zip(range(first, last + 1), checks, lengths, strict=True))
        snapshot_seqs = [int(seq) for seq in snapshots]
    except (ValueError, KeyError, TypeError, RecursionError):
        return [(seq, UNREADABLE, 0) for seq in range(first, last + 1)], [], memoryview(b"")
    bodies = view[end + 1 :]
    if bytes(bodies[-2:]) == b"]\n" and bytes(bodies[:1]) == b"[":
        return index, snapshot_seqs, bodies[1:-2]
    return index, snapshot_seqs, bodies  # damaged: the bodies' checksums will say where


def split_piece(piece: Piece) -> list[RawRecord]:
    """The records of a piece one by one (a body cut short or shifted by damage fails its checksum)."""
    index, snapshots, bodies = piece
    records, offset = [], 0
    for seq, check, length in index:
        records.append((seq, check, bytes(bodies[offset : offset + length]), seq in snapshots))
        offset += length + 1
    return records


def parse_summary(run_id: str, header_line: bytes) -> RunSummary:
    """The run summary in a record file's header line; raises ValueError, KeyError, TypeError or
    RecursionError if the header is damaged."""
    fields = json.loads(header_line)["summary"]
    return RunSummary(
        run_id=run_id,
        task=str(fields["task"]),
        phase=str(fields["phase"]),
        turns=int(fields["turns"]),
        tokens_used=int(fields["tokens_used"]),
        save_seq=int(fields["save_seq"]),
        updated_at=float(fields["updated_at"]),
    )


# --------------------------------------------------------------------------- ledger and lease files


def entry_bytes(sealed: SealedEntry) -> bytes:
    """An effect-ledger file: the entry's JSON with its checksum."""
    return pretty({**sealed.entry.to_json(), "checksum": sealed.checksum})


def read_entry(path: Path) -> SealedEntry | None:
    """The effect-ledger entry in ``path``; None if missing; CorruptCheckpoint if unparsable."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size > MAX_RECORD_BYTES:
                raise CorruptCheckpoint(f"effect ledger entry {path} is larger than {MAX_RECORD_BYTES} bytes")
            data = handle.read()
    except FileNotFoundError:
        return None
    try:
        fields = json.loads(data)
        check = fields.get("checksum")
        return SealedEntry(LedgerEntry.from_json(fields), check if isinstance(check, str) else None)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise CorruptCheckpoint(
            f"effect ledger entry {path} is damaged ({type(exc).__name__}: {exc}); restore it or remove it"
        ) from exc


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None if missing; raises ValueError if damaged."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except RecursionError as exc:  # hostile nesting: damaged, like any other bad JSON
        raise ValueError(f"{path} is nested too deeply") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def lease_bytes(owner: str | None, fence: int, expires_at: float) -> bytes:
    """The content of lease.json (and lease.prev.json)."""
    return pretty({"owner": owner, "fence": fence, "expires_at": expires_at})


def lease_state(run_dir: Path) -> tuple[str | None, int, float]:
    """(owner, fence, expires_at) of the run; (None, 0, 0.0) when it never had a lease.

    lease.json is replaced by rename, so it is never torn by a crash; if it is damaged
    anyway, its fence is rebuilt as ``next_fence`` would have made it from lease.prev.json, on
    the clock when lease.json was written (its time stamp, plus a second for a stamp that lags
    the clock), so the fence never goes back."""
    try:
        lease = _read_json(run_dir / "lease.json")
        if lease is None:
            return None, 0, 0.0
        owner = lease.get("owner")
        return (str(owner) if owner is not None else None), int(lease["fence"]), float(lease["expires_at"])
    except (ValueError, KeyError, TypeError):
        pass
    try:
        prev = _read_json(run_dir / "lease.prev.json")
        prev_fence = int(prev["fence"]) if prev is not None else 0
    except (ValueError, KeyError, TypeError):
        prev_fence = 0
    try:
        written = (run_dir / "lease.json").stat().st_mtime + 1.0
    except OSError:
        written = 0.0
    return None, next_fence(prev_fence, written), 0.0
