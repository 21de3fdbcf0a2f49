"""The effect-ledger steps an integration's tool wrapper takes around one call, by effect class
(the rule of ``reconcile``, for frameworks whose own loop runs the tools):

* ``before``: read_only runs (nothing recorded); else the call's intent is claimed in the ledger
  under its idempotency key. A settled key is answered with its recorded result; an in-doubt key
  (an earlier attempt was interrupted) is, for a side effect, asked to the probe and otherwise
  answered UNKNOWN OUTCOME; an idempotent call is run again (same key). A key first used with
  other arguments is answered with the conflict, nothing run.
* ``after`` records the outcome; ``interrupted`` marks it unknown when the tool raised (it may
  have acted before raising).

The key must name the call's occurrence (an integration derives it with ``state.occurrence_key``),
never the provider's id alone: servers reuse ids (``call_0``) across answers.
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass

from ..errors import ConfigError, IdempotencyConflict
from ..ledger import EffectLedger, unknown_result
from ..state import Effect, LedgerEntry, ToolCall, ToolResult
from ..tools import Found, NotExecuted, Probe

CURRENT_CALL: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar("unbroken_current_call", default=None)


def current_call() -> ToolCall:
    """Inside a tool run through an integration's durable wrapper: the call being run, with its
    ``idempotency_key`` (pass it to the service you call so that a repeat is harmless, or find
    the effect in a probe)."""
    call = CURRENT_CALL.get()
    if call is None:
        raise ConfigError("current_call() is only available inside a tool run through unbroken's durable wrapper")
    return call


@dataclass(frozen=True)
class Answered:
    """The call is answered with ``content`` without running the tool."""

    content: str
    is_error: bool = False


def before(ledger: EffectLedger, call: ToolCall, effect: Effect, probe: Probe | None) -> Answered | LedgerEntry | None:
    """What to do with ``call``: ``Answered`` (do not run), an entry (run it, then ``after``),
    or None (read_only: run it, nothing recorded)."""
    if effect == "read_only":
        return None
    try:
        claim = ledger.claim(call)
    except IdempotencyConflict as exc:
        return Answered(str(exc), is_error=True)
    entry = claim.entry
    if claim.outcome == "settled":
        assert entry.result is not None
        return Answered(entry.result.content, entry.result.is_error)
    if claim.outcome == "in_doubt":
        if effect == "side_effect":
            answer = _ask(probe, call)
            if isinstance(answer, Found):
                content = answer.result if isinstance(answer.result, str) else json.dumps(answer.result)
                ledger.store.ledger_put(EffectLedger.outcome(entry, ToolResult(call.id, content, how="probed")))
                return Answered(content)
            if not isinstance(answer, NotExecuted):
                ledger.mark_unknown(entry)
                unknown = unknown_result(call, answer)
                return Answered(unknown.content, is_error=True)
        entry = ledger.retry(entry)
    return entry


def after(
    ledger: EffectLedger, entry: LedgerEntry | None, call: ToolCall, content: str, is_error: bool = False
) -> None:
    """Record the tool's outcome (durable when it returns); nothing for a read_only call."""
    if entry is not None:
        ledger.store.ledger_put(EffectLedger.outcome(entry, ToolResult(call.id, content, is_error)))


def interrupted(ledger: EffectLedger, entry: LedgerEntry | None) -> None:
    """The tool raised: it may have acted before, so its outcome is unknown from now on."""
    if entry is not None:
        ledger.mark_unknown(entry)


def _ask(probe: Probe | None, call: ToolCall) -> Found | NotExecuted | str:
    """The probe's answer, or why there is none (the reason text of an unknown outcome)."""
    if probe is None:
        return "the tool has no probe"
    try:
        answer = probe(call)
    except Exception as exc:  # a failing probe is no evidence either way
        return f"the probe raised {type(exc).__name__}: {exc}"
    if isinstance(answer, (Found, NotExecuted)):
        return answer
    return getattr(answer, "reason", "") or "the probe could not tell"
