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

from ..codec import MAX_RECORD_BYTES, EncodedSave, StoredRecord, dumps
from ..errors import CorruptCheckpoint
from ..state import LedgerEntry, RunSummary

STORE_SCHEMA = 1
MARKER = "unbroken-store.json"
UNREADABLE = "unreadable"
"""The checksum given to a record file that cannot be parsed, so the codec reports it as damaged."""

HEADER_CAP = 1024 * 1024  # the header line (mostly the run's task) on top of the body cap
_HEADER_TASK_CHARS = 64 * 1024
_RECORD_FILE = re.compile(r"^(\d{12})\.json$")
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


def record_seqs(records: Path) -> list[int]:
    """The seqs of the record files in ``records``, ascending (temp files are not records)."""
    seqs = []
    for name in os.listdir(records):
        match = _RECORD_FILE.match(name)
        if match:
            seqs.append(int(match.group(1)))
    seqs.sort()
    return seqs


# --------------------------------------------------------------------------- record files


def record_bytes(save: EncodedSave) -> bytes:
    """A record file: a JSON header line (with the run summary ``list_runs`` shows), then the body."""
    body = save.body.encode()
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


def parse_record(seq: int, data: bytes) -> StoredRecord:
    """The record in a record file's bytes; damage gives a record whose checksum fails."""
    head, _, rest = data.partition(b"\n")
    try:
        header = json.loads(head)
    except (ValueError, RecursionError):
        return StoredRecord(seq, "", UNREADABLE)
    if not isinstance(header, dict) or header.get("seq") != seq or not isinstance(header.get("checksum"), str):
        return StoredRecord(seq, "", UNREADABLE)
    if rest.endswith(b"\n"):
        rest = rest[:-1]
    # A torn body decodes to text whose checksum fails: the codec reports it at this seq.
    return StoredRecord(seq, rest.decode("utf-8", errors="replace"), header["checksum"])


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


def read_entry(path: Path) -> LedgerEntry | None:
    """The effect-ledger entry in ``path``; None if missing; CorruptCheckpoint if damaged."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size > MAX_RECORD_BYTES:
                raise CorruptCheckpoint(f"effect ledger entry {path} is larger than {MAX_RECORD_BYTES} bytes")
            data = handle.read()
    except FileNotFoundError:
        return None
    try:
        return LedgerEntry.from_json(json.loads(data))
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
    anyway, its fence is rebuilt from lease.prev.json (it is always one more), so the fence
    never goes back."""
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
    return None, prev_fence + 1, 0.0
