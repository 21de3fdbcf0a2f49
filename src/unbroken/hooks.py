"""Hooks: typed events a user's callbacks receive while a run goes on.

Register callables on the agent (``Agent(..., hooks=[print_event])``); each gets every event,
in the order they happen, in the thread that drives the run (a tool's start and end under
``arun`` too). Match on the type::

    def on_event(event: unbroken.hooks.Event) -> None:
        match event:
            case ModelCallEnded(usage=usage): meter.add(usage.get("output_tokens", 0))
            case ToolEnded(tool=name, outcome="unknown"): page_someone(name)

A hook must be quick and must not raise: an exception from a hook is logged and ignored, it
never changes the run. Events describe what has already happened (``SavePoint`` is emitted
once the save is durable); hooks cannot veto anything. Without hooks nothing is built, and this
module is not even imported: the engine calls ``emitters``, which imports it for the first event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import clock
from .redact import log_failure
from .state import JSONValue

log = logging.getLogger("unbroken")


@dataclass(frozen=True)
class RunStarted:
    """The run was opened (started, or loaded to resume) under this process's lease."""

    run_id: str
    resumed: bool
    save_seq: int
    turns: int
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class RunEnded:
    """The run call returned (``status`` is the phase) or raised (``error`` names it)."""

    run_id: str
    status: str
    turns: int
    tokens_used: int
    error: str | None = None
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class ModelCallStarted:
    """The model is asked for turn ``turn`` (1-based)."""

    run_id: str
    turn: int
    provider: str
    model: str | None
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class ModelCallEnded:
    """The model answered (``usage`` as the provider reported it) or failed (``error``)."""

    run_id: str
    turn: int
    provider: str
    model: str | None
    usage: dict[str, JSONValue]
    tokens: int
    tool_calls: int
    seconds: float
    error: str | None = None
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class ToolStarted:
    """A tool call starts executing (its ledger intent, if any, is durable)."""

    run_id: str
    call_id: str
    tool: str
    effect: str
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class ToolEnded:
    """A tool call is settled. ``outcome`` is how its result came about: ``executed``,
    ``reused``, ``probed``, ``unknown``, ``invalid``, ``resolved``, ``skipped`` or ``denied``;
    ``seconds`` is None when it did not execute now."""

    run_id: str
    call_id: str
    tool: str
    effect: str | None
    outcome: str
    is_error: bool
    seconds: float | None
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class SavePoint:
    """A save point is durable."""

    run_id: str
    seq: int
    label: str
    phase: str
    turns: int
    tokens_used: int
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class ReconcileDecision:
    """On resume, what was decided for a call left without a result by the crash: ``action`` is
    ``execute`` (run it now), ``answer`` (settled without running: see ``outcome``) or
    ``unknown``; ``reason`` says why when it is unknown."""

    run_id: str
    call_id: str
    tool: str
    action: str
    outcome: str | None
    reason: str
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class LeaseWasLost:
    """Another worker took the run over; this process stopped writing it."""

    run_id: str
    reason: str
    at: float = field(default_factory=clock.wall)


@dataclass(frozen=True)
class ApprovalRequested:
    """A call waits for a person (``unbroken approve`` / ``unbroken deny``)."""

    run_id: str
    call_id: str
    tool: str
    input: dict[str, JSONValue]
    digest: str
    expires_at: float | None
    at: float = field(default_factory=clock.wall)


Event = (
    RunStarted
    | RunEnded
    | ModelCallStarted
    | ModelCallEnded
    | ToolStarted
    | ToolEnded
    | SavePoint
    | ReconcileDecision
    | LeaseWasLost
    | ApprovalRequested
)
Hook = Callable[[Event], Any]


def emit(hooks: tuple[Hook, ...], event: Event) -> None:
    """Give ``event`` to every hook; a hook that raises is logged, never propagated."""
    for hook in hooks:
        try:
            hook(event)
        except Exception as exc:
            log_failure(log, f"hook {hook!r} raised on {type(event).__name__}", exc)


__all__ = [
    "ApprovalRequested",
    "Event",
    "Hook",
    "LeaseWasLost",
    "ModelCallEnded",
    "ModelCallStarted",
    "ReconcileDecision",
    "RunEnded",
    "RunStarted",
    "SavePoint",
    "ToolEnded",
    "ToolStarted",
]
