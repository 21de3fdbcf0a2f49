"""The S3 store's object formats: packed records, the run head, ledger entries, the URL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..codec import EncodedSave
from ..errors import CorruptCheckpoint, InvalidStoreURL
from ..state import LedgerEntry
from .backend import SealedEntry

Head = dict[str, Any]
"""The run head object: seq, fence, owner, expires_at, summary, segments [[first, last, name]],
tail [[seq, name]] (the loose records), and a version bumped by every write."""


def pack(records: Sequence[tuple[int, str, bytes]]) -> bytes:
    """One object holding records: a JSON index line ``[[seq, checksum, length], ...]``, then
    the bodies back to back."""
    index = [[seq, check, len(body)] for seq, check, body in records]
    return json.dumps(index).encode() + b"\n" + b"".join(body for _, _, body in records)


def unpack(data: bytes, seqs: Sequence[int]) -> list[tuple[int, str, bytes]]:
    """The records of a packed object. An index that does not parse yields the expected seqs
    with empty bodies and a checksum that cannot match, so the damage is found above."""
    try:
        line, _, bodies = data.partition(b"\n")
        records, offset = [], 0
        for seq, check, length in json.loads(line):
            records.append((int(seq), str(check), bodies[offset : offset + int(length)]))
            offset += int(length)
        return records
    except (ValueError, TypeError):
        return [(seq, "damaged", b"") for seq in seqs]


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {"endpoint", "region"})
    if unknown:
        raise InvalidStoreURL(
            f"store URL {url!r} has unknown option(s) {', '.join(unknown)}; allowed: endpoint, region"
        )
    bucket = parts.netloc
    if not bucket or "@" in bucket:
        raise InvalidStoreURL(
            f"store URL {url!r} names no bucket; use s3://BUCKET/PREFIX (credentials come from AWS env)"
        )
    prefix = parts.path.strip("/")
    return bucket, f"{prefix}/" if prefix else "", options


def empty_head() -> Head:
    return {"seq": 0, "fence": 0, "owner": None, "expires_at": 0.0, "summary": None, "segments": [], "tail": []}


def summary_json(save: EncodedSave) -> dict[str, Any]:
    s = save.summary
    return {
        "task": s.task,
        "phase": s.phase,
        "turns": s.turns,
        "tokens_used": s.tokens_used,
        "updated_at": s.updated_at,
    }


def parse_entry(body: bytes) -> SealedEntry:
    try:
        data = json.loads(body)
        return SealedEntry(LedgerEntry.from_json(data["entry"]), data["checksum"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(
            f"an effect ledger entry in S3 does not parse ({exc}); nothing was changed. Restore it from a backup; "
            "its result is not given to the model",
            last_good_seq=None,
        ) from exc
