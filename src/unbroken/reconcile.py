"""What to do with a tool call that has no recorded result.

The same rules serve a fresh call and a call left dangling by a crash:

==============  ==========================================================================
read_only       run it (again)
idempotent      settled in the ledger: reuse the result; otherwise run it with the same key
side_effect     settled: reuse; never started: run; started but unsettled: ask the probe:
                Found -> its result, NotExecuted -> run, Unknown/no probe -> unknown outcome
==============  ==========================================================================

A malformed call (unknown tool, arguments that are not an object, or arguments that do not
fit the tool's signature as it is now: ``unbindable``) is answered with an ``is_error``
result and never executed; a side effect that may already have run before its signature
changed is an unknown outcome instead. The same holds for a call whose tool was removed from
the agent since it was recorded: settled from the ledger, reused if settled, an unknown outcome
if it may have run, "not executed" only when nothing about it was ever claimed. An unknown
outcome is never hidden: the runner's policy decides whether the model is told, the run
pauses for a person, or the run fails.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any, Literal

from ._plain import Frozen
from .codec import ensure_json
from .errors import NotJSONValue
from .ledger import EffectLedger
from .state import LedgerEntry, ProbeAnswer, ToolCall, ToolResult
from .tools import Found, NotExecuted, Tool, Unknown

Action = Literal["execute", "answer", "unknown", "probe"]


class Decision(Frozen):
    """``execute``: run the tool now (``entry`` is its pending ledger entry, None for read-only).
    ``answer``: use ``result`` without running anything (``entry``, if set, is saved with it).
    ``unknown``: the outcome cannot be established (``entry`` is the in-doubt ledger entry).
    ``probe``: in doubt; ask the tool's probe, then ``after_probe`` decides (the engine's
    driver calls the probe, awaiting it if it is async).

    The why, saved with the call's settlement: ``ledger``, the ledger status found (None: no
    entry), ``probe``, the probe's answer (None: not asked), ``reason`` in words."""

    __slots__ = ("action", "entry", "ledger", "probe", "reason", "result")
    action: Action
    result: ToolResult | None
    entry: LedgerEntry | None
    reason: str
    ledger: str | None
    probe: ProbeAnswer | None

    def __init__(
        self,
        action: Action,
        result: ToolResult | None = None,
        entry: LedgerEntry | None = None,
        reason: str = "",
        ledger: str | None = None,
        probe: ProbeAnswer | None = None,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "action", action)
        set_field(self, "result", result)
        set_field(self, "entry", entry)
        set_field(self, "reason", reason)
        set_field(self, "ledger", ledger)
        set_field(self, "probe", probe)


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
        return Decision("answer", refused(call), reason=call.error)
    if tool is None:
        return _not_runnable(call, None, ledger, f"there is no tool named {call.name!r}", resolution)
    misfit = unbindable(tool, call)
    if misfit is not None:
        return _not_runnable(call, tool, ledger, misfit, resolution)
    if tool.effect == "read_only":
        return Decision("execute")
    claim = ledger.claim(call)
    if claim.outcome == "claimed":
        return Decision("execute", entry=claim.entry)
    entry = claim.entry
    if claim.outcome == "settled":
        assert entry.result is not None
        return Decision("answer", entry.result.replace(call_id=call.id, how="reused"), ledger=entry.status)
    # In doubt: an earlier attempt began and its outcome was never recorded.
    if resolution == "not_executed":
        why = "a person said it did not take effect (unbroken resolve)"
        return Decision("execute", entry=ledger.retry(entry), reason=why, ledger=entry.status)
    if tool.effect == "idempotent":
        why = "idempotent: run again with the same key"
        return Decision("execute", entry=ledger.retry(entry), reason=why, ledger=entry.status)
    if tool.probe is None:
        return Decision("unknown", entry=entry, reason="the tool has no probe", ledger=entry.status, probe="none")
    return Decision("probe", entry=entry, ledger=entry.status)


def unbindable(tool: Tool, call: ToolCall) -> str | None:
    """Why ``call``'s arguments cannot be passed to ``tool`` as it is defined now (the tool's
    signature changed since the call was saved, or the model got it wrong); None when they fit.
    Decided before anything is claimed or run: a call that cannot bind is a mistake, not a crash."""
    try:
        signature = _signature(tool.fn)
    except TypeError:  # an unhashable callable: read each time
        signature = _signature.__wrapped__(tool.fn)
    if signature is None:
        return None  # not introspectable (a builtin): let the call say
    try:
        signature.bind(**tool.arguments(call, {}))
    except TypeError as exc:
        return f"its arguments do not fit the signature of tool {call.name!r} as defined now ({exc})"
    return None


@functools.lru_cache(maxsize=256)  # a tool's function is read once, not at every call
def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _not_runnable(
    call: ToolCall, tool: Tool | None, ledger: EffectLedger, why: str, resolution: str | None = None
) -> Decision:
    """A call that cannot run (``tool`` is gone, or the call's arguments no longer fit it):
    settled from the ledger. Reused if settled; "not executed" when nothing about it was ever
    claimed (or it is read-only); an idempotent call that may have run is answered with an
    error saying so (running it again is safe, so the model may); any other call that may
    have run is an unknown outcome (the agent's policy: tell the model, pause for
    ``unbroken resolve``, or fail), never a silent failure."""
    entry = None if tool is not None and tool.effect == "read_only" else ledger.get(call.idempotency_key)
    if entry is None:
        result = ToolResult(call.id, f"Error: {why}. The call was not executed.", True, "invalid")
        return Decision("answer", result, reason=why)
    if entry.status in ("succeeded", "failed") and entry.result is not None:
        return Decision("answer", entry.result.replace(call_id=call.id, how="reused"), ledger=entry.status)
    if resolution == "not_executed":  # a person checked: it did not happen, and it cannot run now
        text = f"Error: {why}. The call did not take effect (checked by a person) and was not executed."
        result = ToolResult(call.id, text, True, "invalid")
        reason = f"{why}; a person said it did not take effect (unbroken resolve)"
        return Decision("answer", result, EffectLedger.outcome(entry, result), reason, ledger=entry.status)
    if tool is None:
        why = f"the tool {call.name!r} is no longer defined on this agent"
    elif tool.effect == "idempotent":
        text = (
            f"Error: {why}. The call was not run again; an earlier attempt may have run. The tool is "
            "idempotent: calling it again with arguments that fit is safe."
        )
        result = ToolResult(call.id, text, True, "invalid")
        return Decision("answer", result, EffectLedger.outcome(entry, result), why, ledger=entry.status)
    reason = f"{why}, and an earlier attempt may have run"
    return Decision("unknown", entry=entry, reason=reason, ledger=entry.status)


def after_probe(
    call: ToolCall, entry: LedgerEntry, ledger: EffectLedger, answer: object, error: Exception | None = None
) -> Decision:
    """The decision once the probe answered ``answer`` (or raised ``error``)."""
    found = entry.status
    if error is not None:  # a failing probe is no evidence either way
        why = f"the probe raised {type(error).__name__}: {error}"
        return Decision("unknown", entry=entry, reason=why, ledger=found, probe="raised")
    if isinstance(answer, Found):
        try:
            content = to_content(answer.result)
        except TypeError as exc:
            why = f"the probe's result is unusable: {exc}"
            return Decision("unknown", entry=entry, reason=why, ledger=found, probe="found")
        result = ToolResult(call.id, content, False, "probed")
        return Decision("answer", result, EffectLedger.outcome(entry, result), ledger=found, probe="found")
    if isinstance(answer, NotExecuted):
        return Decision("execute", entry=ledger.retry(entry), ledger=found, probe="not_executed")
    reason = answer.reason if isinstance(answer, Unknown) else f"the probe returned {answer!r}"
    return Decision("unknown", entry=entry, reason=reason or "the probe could not tell", ledger=found, probe="unknown")


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
    """Run a probe from async code: an async probe on the loop; a sync one in the loop's default
    executor, as a sync tool is (a probe asks another system, a round trip the loop must not
    wait on), with the caller's context."""
    import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

    assert tool.probe is not None
    try:
        if inspect.iscoroutinefunction(tool.probe):
            answer: object = tool.probe(call)
        else:
            answer = await asyncio.to_thread(tool.probe, call)
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
