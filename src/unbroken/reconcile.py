"""What to do with a tool call that has no recorded result.

The same rules serve a fresh call and a call left dangling by a crash:

==============  ==========================================================================
read_only       run it (again)
idempotent      settled in the ledger: reuse the result; otherwise run it with the same key
side_effect     settled: reuse; never started: run; started but unsettled: ask the probe:
                Found -> its result, NotExecuted -> run, Unknown/no probe -> unknown outcome
==============  ==========================================================================

A malformed call (unknown tool, arguments that are not an object) is answered with an
``is_error`` result and never executed. An unknown outcome is never hidden: the runner's
policy decides whether the model is told, the run pauses for a person, or the run fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from .codec import ensure_json
from .errors import NotJSONValue
from .ledger import EffectLedger
from .state import LedgerEntry, ToolCall, ToolResult
from .tools import Found, NotExecuted, Tool, Unknown

Action = Literal["execute", "answer", "unknown"]


@dataclass(frozen=True)
class Decision:
    """``execute``: run the tool now (``entry`` is its pending ledger entry, None for read-only).
    ``answer``: use ``result`` without running anything (``entry``, if set, is saved with it).
    ``unknown``: the outcome cannot be established (``entry`` is the in-doubt ledger entry)."""

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


def decide(call: ToolCall, tool: Tool | None, ledger: EffectLedger, resolution: str | None = None) -> Decision:
    """Decide what happens to ``call``. May write to the ledger (intent, retry); never runs the tool."""
    if call.error is not None or tool is None:
        why = call.error or f"there is no tool named {call.name!r}"
        return Decision("answer", ToolResult(call.id, f"Error: {why}. The call was not executed.", True, "invalid"))
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
    try:
        answer = tool.probe(call)
    except Exception as exc:  # a failing probe is no evidence either way
        return Decision("unknown", entry=entry, reason=f"the probe raised {type(exc).__name__}: {exc}")
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
