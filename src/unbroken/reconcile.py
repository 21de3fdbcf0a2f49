"""What to do with a tool call that has no recorded result.

The same rules serve a fresh call and a call left dangling by a crash:

==============  ==========================================================================
read_only       run it (again)
idempotent      settled in the ledger: reuse the result; otherwise run it with the same key
side_effect     settled: reuse; never started: run; started but unsettled: ask the probe:
                Found -> its result, NotExecuted -> run, Unknown/no probe -> unknown outcome
==============  ==========================================================================

A malformed call (unknown tool, arguments that are not an object) is answered with an
``is_error`` result and never executed. A call whose tool was removed from the agent since it
was recorded is settled from the ledger: reused if settled, an unknown outcome if it may have
run, "not executed" only when nothing about it was ever claimed. An unknown outcome is never hidden: the runner's
policy decides whether the model is told, the run pauses for a person, or the run fails.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from .codec import ensure_json
from .errors import NotJSONValue
from .ledger import EffectLedger
from .state import LedgerEntry, ToolCall, ToolResult
from .tools import Found, NotExecuted, Tool, Unknown

Action = Literal["execute", "answer", "unknown", "probe"]


@dataclass(frozen=True)
class Decision:
    """``execute``: run the tool now (``entry`` is its pending ledger entry, None for read-only).
    ``answer``: use ``result`` without running anything (``entry``, if set, is saved with it).
    ``unknown``: the outcome cannot be established (``entry`` is the in-doubt ledger entry).
    ``probe``: in doubt; ask the tool's probe, then ``after_probe`` decides (the engine's
    driver calls the probe, awaiting it if it is async)."""

    action: Action
    result: ToolResult | None = None
    entry: LedgerEntry | None = None
    reason: str = ""


def to_content(value: Any) -> str:
    """A tool's return value as tool-result text: str as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        ensure_json(value, "result")
    except NotJSONValue as exc:
        raise TypeError(f"the tool returned a {type(value).__name__}, which is not JSON: {exc}") from exc
    return json.dumps(value, ensure_ascii=False)


def render_content(value: Any) -> str:
    """Like ``to_content``, but never fails: a value that is not JSON (a datetime, an object)
    is rendered as JSON with its non-JSON parts as text, and the result says so. A tool that
    returned has done its work; its result must not turn into an error."""
    try:
        return to_content(value)
    except TypeError:
        pass
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(str(value), ensure_ascii=False)
    return f"{text}\n[unbroken: the tool returned a {type(value).__name__} that is not plain JSON; shown as text]"


def refused(call: ToolCall) -> ToolResult:
    """The ``is_error`` result of a call that is never run (``call.error`` says why)."""
    return ToolResult(call.id, f"Error: {call.error}. The call was not executed.", True, "invalid")


def decide_first(call: ToolCall, tool: Tool | None, ledger: EffectLedger, resolution: str | None = None) -> Decision:
    """Decide what happens to ``call``, up to asking a probe (``probe``). May write to the
    ledger (intent, retry); never runs the tool or the probe."""
    if call.error is not None:
        return Decision("answer", refused(call))
    if tool is None:
        return _missing_tool(call, ledger)
    if tool.effect == "read_only":
        return Decision("execute")
    claim = ledger.claim(call)
    if claim.outcome == "claimed":
        return Decision("execute", entry=claim.entry)
    entry = claim.entry
    if claim.outcome == "settled":
        assert entry.result is not None
        return Decision("answer", replace(entry.result, call_id=call.id, how="reused"))
    # In doubt: an earlier attempt began and its outcome was never recorded.
    if resolution == "not_executed" or tool.effect == "idempotent":
        return Decision("execute", entry=ledger.retry(entry))
    if tool.probe is None:
        return Decision("unknown", entry=entry, reason="the tool has no probe")
    return Decision("probe", entry=entry)


def _missing_tool(call: ToolCall, ledger: EffectLedger) -> Decision:
    entry = ledger.get(call.idempotency_key)
    if entry is None:
        why = f"there is no tool named {call.name!r}"
        return Decision("answer", ToolResult(call.id, f"Error: {why}. The call was not executed.", True, "invalid"))
    if entry.status in ("succeeded", "failed") and entry.result is not None:
        return Decision("answer", replace(entry.result, call_id=call.id, how="reused"))
    reason = f"the tool {call.name!r} is no longer defined on this agent, and an earlier attempt may have run"
    return Decision("unknown", entry=entry, reason=reason)


def after_probe(
    call: ToolCall, entry: LedgerEntry, ledger: EffectLedger, answer: object, error: Exception | None = None
) -> Decision:
    """The decision once the probe answered ``answer`` (or raised ``error``)."""
    if error is not None:  # a failing probe is no evidence either way
        return Decision("unknown", entry=entry, reason=f"the probe raised {type(error).__name__}: {error}")
    if isinstance(answer, Found):
        try:
            content = to_content(answer.result)
        except TypeError as exc:
            return Decision("unknown", entry=entry, reason=f"the probe's result is unusable: {exc}")
        result = ToolResult(call.id, content, False, "probed")
        return Decision("answer", result, EffectLedger.outcome(entry, result))
    if isinstance(answer, NotExecuted):
        return Decision("execute", entry=ledger.retry(entry))
    reason = answer.reason if isinstance(answer, Unknown) else f"the probe returned {answer!r}"
    return Decision("unknown", entry=entry, reason=reason or "the probe could not tell")


def call_probe(tool: Tool, call: ToolCall) -> tuple[object, Exception | None]:
    """Run a probe from synchronous code (an async probe is run to completion)."""
    assert tool.probe is not None
    try:
        answer: object = tool.probe(call)
        if inspect.isawaitable(answer):
            import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

            answer = asyncio.run(_await(answer))
        return answer, None
    except Exception as exc:
        return None, exc


async def acall_probe(tool: Tool, call: ToolCall) -> tuple[object, Exception | None]:
    """Run a probe from async code (a sync probe runs in place: probes are short reads)."""
    assert tool.probe is not None
    try:
        answer: object = tool.probe(call)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer, None
    except Exception as exc:
        return None, exc


async def _await(value: Any) -> Any:
    return await value


def decide(call: ToolCall, tool: Tool | None, ledger: EffectLedger, resolution: str | None = None) -> Decision:
    """Decide what happens to ``call``, asking the probe if needed (synchronously). May write to
    the ledger (intent, retry); never runs the tool."""
    decision = decide_first(call, tool, ledger, resolution)
    if decision.action != "probe":
        return decision
    assert tool is not None and decision.entry is not None
    answer, error = call_probe(tool, call)
    return after_probe(call, decision.entry, ledger, answer, error)
