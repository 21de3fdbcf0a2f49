"""The journal: every tool execution of a run, logged by the tool's wrapper, not by the agent.

Each tool is wrapped to append an ``enter`` and an ``exit`` line (idempotency key, tool name,
effect class) to ``journal.jsonl`` in the run's directory, so the sweep counts side-effecting
executions per key from what actually ran."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from ..state import ToolCall
from ..tools import Tool

JOURNAL = "journal.jsonl"


def _journal_line(world: Path, entry: dict[str, Any]) -> None:
    # One O_APPEND write per line: a SIGKILL never leaves half a line behind.
    fd = os.open(world / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def journaled(tool: Tool, world: Path) -> Tool:
    """The same tool, logging each execution's start and end to the world's journal."""
    original = tool.fn
    wants_call = tool.takes_call

    def args_for(call: ToolCall, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "call": call} if wants_call else kwargs

    def mark(what: str, call: ToolCall) -> None:
        _journal_line(world, {"at": what, "key": call.idempotency_key, "tool": tool.name, "effect": tool.effect})

    if tool.is_async:

        async def run_async(*, call: ToolCall, **kwargs: Any) -> Any:
            mark("enter", call)
            value = await original(**args_for(call, kwargs))
            mark("exit", call)
            return value

        return dataclasses.replace(tool, fn=run_async, takes_call=True)

    def run_sync(*, call: ToolCall, **kwargs: Any) -> Any:
        mark("enter", call)
        value = original(**args_for(call, kwargs))
        mark("exit", call)
        return value

    return dataclasses.replace(tool, fn=run_sync, takes_call=True)


def read_journal(world: Path) -> list[dict[str, Any]]:
    """The journal's lines, oldest first ([] before any tool ran)."""
    path = world / JOURNAL
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def journal_text(world: Path) -> str:
    """The journal as written ("" before any tool ran), to compare two runs byte for byte."""
    path = world / JOURNAL
    return path.read_text() if path.exists() else ""
