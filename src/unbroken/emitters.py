"""The engine's side of hooks: one call per event, a no-op when the agent has no hooks.

Each function returns at once when ``agent.hooks`` is empty, before building anything; the event
types (``unbroken.hooks``, 10 frozen dataclasses, ~10 ms to create at import) are imported with
the first event a hook receives, so a run without hooks never loads them (issue 24).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .state import JSONValue, ToolCall, ToolResult

if TYPE_CHECKING:
    from .model import ModelTurn
    from .reconcile import Decision
    from .session import RunSession
    from .tools import Tool

_tool_clocks: dict[tuple[str, str], float] = {}  # (run id, call key) -> when the call started


def _model_name(session: RunSession) -> str | None:
    name = getattr(session.agent.model, "model", None)
    return name if isinstance(name, str) else None


def run_started(session: RunSession) -> None:
    if session.agent.hooks:
        from . import hooks

        state = session.state
        hooks.emit(session.agent.hooks, hooks.RunStarted(session.run_id, session.resumed, state.save_seq, state.turns))


def run_ended(session: RunSession, error: BaseException | None) -> None:
    if session.agent.hooks and hasattr(session, "state"):
        from . import hooks

        state = session.state
        why = f"{type(error).__name__}: {error}" if error is not None else None
        event = hooks.RunEnded(session.run_id, state.phase, state.turns, state.tokens_used, why)
        hooks.emit(session.agent.hooks, event)


def model_call_started(session: RunSession) -> float:
    if session.agent.hooks:
        from . import hooks

        turn = session.state.turns + 1
        event = hooks.ModelCallStarted(session.run_id, turn, session.agent.model.provider, _model_name(session))
        hooks.emit(session.agent.hooks, event)
    return time.perf_counter()


def model_call_ended(session: RunSession, began: float, turn: ModelTurn | None, error: Exception | None) -> None:
    if not session.agent.hooks:
        return
    from . import hooks

    event = hooks.ModelCallEnded(
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
    hooks.emit(session.agent.hooks, event)


def tool_started(session: RunSession, call: ToolCall, tool: Tool) -> None:
    if session.agent.hooks:
        from . import hooks

        _tool_clocks[(session.run_id, call.idempotency_key)] = time.perf_counter()
        hooks.emit(session.agent.hooks, hooks.ToolStarted(session.run_id, call.id, call.name, tool.effect))


def tool_ended(session: RunSession, call: ToolCall, result: ToolResult) -> None:
    if not session.agent.hooks:
        return
    from . import hooks

    began = _tool_clocks.pop((session.run_id, call.idempotency_key), None)
    tool = session.agent.tools.get(call.name)
    event = hooks.ToolEnded(
        run_id=session.run_id,
        call_id=call.id,
        tool=call.name,
        effect=tool.effect if tool is not None else None,
        outcome=result.how,
        is_error=result.is_error,
        seconds=time.perf_counter() - began if began is not None else None,
    )
    hooks.emit(session.agent.hooks, event)


def save_point(session: RunSession, label: str) -> None:
    if session.agent.hooks:
        from . import hooks

        state = session.state
        event = hooks.SavePoint(session.run_id, state.save_seq, label, state.phase, state.turns, state.tokens_used)
        hooks.emit(session.agent.hooks, event)


def reconcile_decision(session: RunSession, call: ToolCall, decision: Decision) -> None:
    if session.agent.hooks:
        from . import hooks

        outcome = decision.result.how if decision.result is not None else None
        event = hooks.ReconcileDecision(session.run_id, call.id, call.name, decision.action, outcome, decision.reason)
        hooks.emit(session.agent.hooks, event)


def lease_lost(session: RunSession, error: BaseException) -> None:
    if session.agent.hooks:
        from . import hooks

        hooks.emit(session.agent.hooks, hooks.LeaseWasLost(session.run_id, str(error)))


def approval_requested(session: RunSession, call: ToolCall, request: dict[str, JSONValue]) -> None:
    if session.agent.hooks:
        from . import hooks

        event = hooks.ApprovalRequested(
            session.run_id, call.id, call.name, call.input, str(request["digest"]), request.get("expires_at")
        )
        hooks.emit(session.agent.hooks, event)
