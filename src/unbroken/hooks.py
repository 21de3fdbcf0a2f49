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
once the save is durable); hooks cannot veto anything. Without hooks nothing is built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import clock
from .redact import log_failure
from .state import JSONValue, ToolCall, ToolResult

if TYPE_CHECKING:
    from .model import ModelTurn
    from .reconcile import Decision
    from .session import RunSession
    from .tools import Tool

log = logging.getLogger("unbroken")
_tool_clocks: dict[tuple[str, str], float] = {}  # (run id, call key) -> when the call started


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


# --------------------------------------------------------------------------- emitters the engine calls
# Each returns at once when the agent has no hooks, before building anything.


def _model_name(session: RunSession) -> str | None:
    name = getattr(session.agent.model, "model", None)
    return name if isinstance(name, str) else None


def run_started(session: RunSession) -> None:
    if session.agent.hooks:
        state = session.state
        emit(session.agent.hooks, RunStarted(session.run_id, session.resumed, state.save_seq, state.turns))


def run_ended(session: RunSession, error: BaseException | None) -> None:
    if session.agent.hooks and hasattr(session, "state"):
        state = session.state
        why = f"{type(error).__name__}: {error}" if error is not None else None
        emit(session.agent.hooks, RunEnded(session.run_id, state.phase, state.turns, state.tokens_used, why))


def model_call_started(session: RunSession) -> float:
    if session.agent.hooks:
        turn = session.state.turns + 1
        event = ModelCallStarted(session.run_id, turn, session.agent.model.provider, _model_name(session))
        emit(session.agent.hooks, event)
    return time.perf_counter()


def model_call_ended(session: RunSession, began: float, turn: ModelTurn | None, error: Exception | None) -> None:
    if not session.agent.hooks:
        return
    event = ModelCallEnded(
        run_id=session.run_id,
        turn=session.state.turns + (0 if turn is not None else 1),  # recorded already when it answered
        provider=session.agent.model.provider,
        model=_model_name(session),
        usage=dict(turn.usage) if turn is not None else {},
        tokens=int(turn.tokens) if turn is not None else 0,
        tool_calls=len(turn.tool_calls) if turn is not None else 0,
        seconds=time.perf_counter() - began,
        error=f"{type(error).__name__}: {error}" if error is not None else None,
    )
    emit(session.agent.hooks, event)


def tool_started(session: RunSession, call: ToolCall, tool: Tool) -> None:
    if session.agent.hooks:
        _tool_clocks[(session.run_id, call.idempotency_key)] = time.perf_counter()
        emit(session.agent.hooks, ToolStarted(session.run_id, call.id, call.name, tool.effect))


def tool_ended(session: RunSession, call: ToolCall, result: ToolResult) -> None:
    if not session.agent.hooks:
        return
    began = _tool_clocks.pop((session.run_id, call.idempotency_key), None)
    tool = session.agent.tools.get(call.name)
    event = ToolEnded(
        run_id=session.run_id,
        call_id=call.id,
        tool=call.name,
        effect=tool.effect if tool is not None else None,
        outcome=result.how,
        is_error=result.is_error,
        seconds=time.perf_counter() - began if began is not None else None,
    )
    emit(session.agent.hooks, event)


def save_point(session: RunSession, label: str) -> None:
    if session.agent.hooks:
        state = session.state
        event = SavePoint(session.run_id, state.save_seq, label, state.phase, state.turns, state.tokens_used)
        emit(session.agent.hooks, event)


def reconcile_decision(session: RunSession, call: ToolCall, decision: Decision) -> None:
    if session.agent.hooks:
        outcome = decision.result.how if decision.result is not None else None
        event = ReconcileDecision(session.run_id, call.id, call.name, decision.action, outcome, decision.reason)
        emit(session.agent.hooks, event)


def lease_lost(session: RunSession, error: BaseException) -> None:
    if session.agent.hooks:
        emit(session.agent.hooks, LeaseWasLost(session.run_id, str(error)))


def approval_requested(session: RunSession, call: ToolCall, request: dict[str, JSONValue]) -> None:
    if session.agent.hooks:
        event = ApprovalRequested(
            session.run_id, call.id, call.name, call.input, str(request["digest"]), request.get("expires_at")
        )
        emit(session.agent.hooks, event)


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
