"""The journal: every execution of every tool call, logged by a wrapper around the tool.

Each tool of the agent is wrapped (in the child, never in the user's code) to append a
``start`` line before the tool runs and a ``finish`` line after it returns or raises. A line
names the run, the call, its idempotency key, the tool, its declared effect class and a hash
of the arguments. The ``start`` line is fsynced before the tool runs, so an execution that a
kill cut short is still on record. Lines go to ``.chaos/journal.jsonl`` in the run's
directory, one ``O_APPEND`` write each (a kill never leaves half a line).

Two observations ride on the ``finish`` line, as evidence for the repeat analysis:

* ``changed``: whether the run's directory (``$UNBROKEN_CHAOS_DIR``, where the agent's fake
  services live; names starting with a dot at its top, such as chaos's own ``.chaos/``,
  excluded) changed while the tool ran. ``None`` when
  another tool ran at the same time (the async driver runs one turn's calls concurrently), so
  the change cannot be pinned on one tool.
* ``key_read``: whether the tool read ``call.idempotency_key`` (always false for a tool that
  does not take ``call``: it cannot see the key).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...state import JSONValue, ToolCall
from ...tools import Tool

CHAOS_DIR = ".chaos"
"""Chaos's own files inside a run's directory (journal, child status, the store)."""
JOURNAL = "journal.jsonl"
_HASHED_BYTES = 4 << 20  # files larger than this are fingerprinted by size and mtime only


def args_hash(arguments: JSONValue) -> str:
    """A canonical hash of a call's arguments: the same JSON, whatever its key order."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def world_fingerprint(world: Path) -> str:
    """A digest of everything in the run's directory except what starts with a dot at its top
    (chaos's own ``.chaos/``, and where a fake service may keep what is not an effect, such as
    an access log): names, sizes and contents. Rewriting a file with the same bytes changes nothing."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(world):
        at_top = Path(root) == world
        dirs[:] = sorted(d for d in dirs if not (at_top and d.startswith(".")))
        for name in sorted(f for f in files if not (at_top and f.startswith("."))):
            path = Path(root) / name
            try:
                info = path.stat()
                digest.update(f"{path.relative_to(world)}\0{info.st_size}\0".encode())
                if info.st_size <= _HASHED_BYTES:
                    digest.update(path.read_bytes())
                else:
                    digest.update(str(info.st_mtime_ns).encode())
            except OSError:  # removed while we looked: its absence is the state
                continue
    return digest.hexdigest()


def journal_path(world: Path) -> Path:
    return world / CHAOS_DIR / JOURNAL


def _append(world: Path, entry: dict[str, Any], *, sync: bool) -> None:
    # One O_APPEND write per line: a SIGKILL never leaves half a line behind.
    fd = os.open(journal_path(world), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


class _InFlight:
    """Tool executions running now in this process, to tell when two overlapped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.started = 0

    def enter(self) -> tuple[int, bool]:
        with self._lock:
            self.active += 1
            self.started += 1
            return self.started, self.active > 1

    def leave(self, my_start: int) -> bool:
        """True when another execution started while this one ran."""
        with self._lock:
            self.active -= 1
            return self.started != my_start


class _WatchedCall(ToolCall):
    """The call as the tool sees it: notes whether the tool read its idempotency key."""

    key_read = False

    def __getattribute__(self, name: str) -> Any:
        if name in ("idempotency_key", "to_json"):
            object.__setattr__(self, "key_read", True)
        return super().__getattribute__(name)


class Journal:
    """Wraps tools so that each execution of a run's tool calls is logged in ``world``."""

    def __init__(self, world: Path, run_id: str, driver: str) -> None:
        self.world = world
        self.run_id = run_id
        self.driver = driver
        self._flight = _InFlight()
        (world / CHAOS_DIR).mkdir(exist_ok=True)

    def _line(self, at: str, tool: Tool, call: ToolCall, **extra: Any) -> dict[str, Any]:
        return {
            "at": at,
            "run_id": self.run_id,
            "call_id": call.id,
            "key": call.idempotency_key,
            "tool": tool.name,
            "effect": tool.effect,
            "args": args_hash(call.input),
            "pid": os.getpid(),
            "driver": self.driver,
            **extra,
        }

    def _start(self, tool: Tool, call: ToolCall) -> tuple[int, bool, str]:
        my_start, overlapped = self._flight.enter()  # first: a change made by another tool from now on is seen
        before = world_fingerprint(self.world)
        _append(self.world, self._line("start", tool, call), sync=True)  # on disk before the tool acts
        return my_start, overlapped, before

    def _finish(
        self, tool: Tool, call: ToolCall, seen: _WatchedCall, begun: tuple[int, bool, str], raised: str | None
    ) -> None:
        my_start, overlapped, before = begun
        after = world_fingerprint(self.world)
        overlapped = self._flight.leave(my_start) or overlapped
        changed = None if overlapped else after != before
        line = self._line("finish", tool, call, changed=changed, key_read=seen.key_read, raised=raised)
        _append(self.world, line, sync=True)

    def wrap(self, tool: Tool) -> Tool:
        """The same tool, logging each execution's start and finish."""
        original: Callable[..., Any] = tool.fn
        wants_call = tool.takes_call

        def watched(call: ToolCall) -> _WatchedCall:
            return _WatchedCall(**{f.name: getattr(call, f.name) for f in dataclasses.fields(ToolCall)})

        def arguments(seen: _WatchedCall, kwargs: dict[str, Any]) -> dict[str, Any]:
            return {**kwargs, "call": seen} if wants_call else kwargs

        if tool.is_async:

            async def run_async(*, call: ToolCall, **kwargs: Any) -> Any:
                seen = watched(call)
                begun = self._start(tool, call)
                try:
                    value = await original(**arguments(seen, kwargs))
                except BaseException as exc:
                    self._finish(tool, call, seen, begun, type(exc).__name__)
                    raise
                self._finish(tool, call, seen, begun, None)
                return value

            return dataclasses.replace(tool, fn=run_async, takes_call=True)

        def run_sync(*, call: ToolCall, **kwargs: Any) -> Any:
            seen = watched(call)
            begun = self._start(tool, call)
            try:
                value = original(**arguments(seen, kwargs))
            except BaseException as exc:
                self._finish(tool, call, seen, begun, type(exc).__name__)
                raise
            self._finish(tool, call, seen, begun, None)
            return value

        return dataclasses.replace(tool, fn=run_sync, takes_call=True)


def read_journal(world: Path) -> list[dict[str, Any]]:
    """The journal's lines, oldest first ([] before any tool ran)."""
    path = journal_path(world)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def journal_text(world: Path) -> str:
    """The journal as written ("" before any tool ran), to compare two runs byte for byte."""
    path = journal_path(world)
    return path.read_text() if path.exists() else ""


CAPPED = "capped.jsonl"
"""Calls the engine settled without running them again, past ``Agent.max_attempts``."""


def capped_recorder(world: Path) -> Callable[[Any], None]:
    """A hook (``Agent(hooks=...)``) noting each call the engine settles as not run again past
    ``max_attempts`` (the result's ``how == "attempts_exhausted"``), before that result is saved."""
    from ...hooks import ReconcileDecision

    def record(event: Any) -> None:
        if isinstance(event, ReconcileDecision) and event.outcome == "attempts_exhausted":
            fd = os.open(world / CHAOS_DIR / CAPPED, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps({"call_id": event.call_id, "tool": event.tool}) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    return record


def capped_calls(world: Path) -> set[str]:
    """The call ids any process of this run settled as not run again past ``max_attempts``."""
    path = world / CHAOS_DIR / CAPPED
    if not path.exists():
        return set()
    return {str(json.loads(line)["call_id"]) for line in path.read_text().splitlines() if line}
