"""Row <-> LedgerEntry conversions shared by the SQL stores (columns in the order of
``ledger_to_row``; the entry's ``fence`` is the column ``lease_fence``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..state import LedgerEntry, ToolResult


def ledger_to_row(entry: LedgerEntry, dumps: Callable[[Any], str]) -> tuple[Any, ...]:
    result = dumps(entry.result.to_json()) if entry.result is not None else None
    return (
        entry.key,
        entry.run_id,
        entry.call_id,
        entry.tool,
        entry.args_hash,
        entry.status,
        entry.attempts,
        result,
        entry.created_at,
        entry.updated_at,
        entry.fence,
    )


def ledger_from_row(row: Sequence[Any]) -> LedgerEntry:
    key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, fence = row
    return LedgerEntry(
        run_id=run_id,
        key=key,
        call_id=call_id,
        tool=tool,
        args_hash=args_hash,
        status=status,
        attempts=attempts,
        result=ToolResult.from_json(json.loads(result)) if result else None,
        created_at=created_at,
        updated_at=updated_at,
        fence=fence,
    )
