"""The effect ledger: what is known about each tool call that is not read-only.

One entry per idempotency key, in the same store as the run. Before a tool runs, its intent
is saved (status ``pending``); its outcome (``succeeded`` / ``failed`` with the result) is
saved together with the run's save record, in one atomic write where the store allows it.
A key already used with different arguments is refused with ``IdempotencyConflict``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from . import clock, crashpoints
from ._plain import Frozen
from .codec import canonical_hash
from .errors import IdempotencyConflict
from .state import LedgerEntry, LedgerStatus, ToolCall, ToolResult
from .stores.base import Store

ClaimOutcome = Literal["claimed", "settled", "in_doubt"]


def args_hash(call: ToolCall) -> str:
    """Hash of what the call does (tool name and arguments), independent of key order."""
    return canonical_hash({"tool": call.name, "input": call.input})


class Claim(Frozen):
    """Result of trying to start a call.

    ``claimed``: the intent is now durable and this caller must run the tool.
    ``settled``: the call already finished; ``entry.result`` is its recorded result.
    ``in_doubt``: an earlier attempt started and never recorded an outcome (``pending``), or
    its outcome was already declared ``unknown``."""

    __slots__ = ("entry", "outcome")
    outcome: ClaimOutcome
    entry: LedgerEntry

    def __init__(self, outcome: ClaimOutcome, entry: LedgerEntry) -> None:
        object.__setattr__(self, "outcome", outcome)
        object.__setattr__(self, "entry", entry)


class EffectLedger:
    """Ledger operations for one run, over any ``Store``. ``fence`` is a callable returning
    the current lease's fence token, so every write is refused once the lease is lost."""

    def __init__(self, store: Store, run_id: str, fence: Callable[[], int | None] = lambda: None) -> None:
        self.store = store
        self.run_id = run_id
        self._fence = fence

    def claim(self, call: ToolCall) -> Claim:
        """Durably record the intent to run ``call`` unless its key is already known."""
        now = clock.wall()
        fence = self._fence()
        entry = LedgerEntry(
            run_id=self.run_id,
            key=call.idempotency_key,
            call_id=call.id,
            tool=call.name,
            args_hash=args_hash(call),
            status="pending",
            attempts=1,
            created_at=now,
            updated_at=now,
            fence=fence,
        )
        crashpoints.hit("ledger.before_intent")
        stored, created = self.store.ledger_claim(entry, fence=fence)
        if created:
            crashpoints.hit("ledger.after_intent")
            return Claim("claimed", stored)
        self.check_same_arguments(stored, call)
        if stored.status in ("succeeded", "failed"):
            return Claim("settled", stored)
        return Claim("in_doubt", stored)

    @staticmethod
    def check_same_arguments(entry: LedgerEntry, call: ToolCall) -> None:
        if entry.args_hash != args_hash(call) or entry.tool != call.name:
            raise IdempotencyConflict(
                f"idempotency key {call.idempotency_key} was first used for {entry.tool} with other "
                f"arguments (hash {entry.args_hash[:12]}); refusing to run {call.name} with these. "
                "Nothing was executed."
            )

    def retry(self, entry: LedgerEntry) -> LedgerEntry:
        """Record a new attempt of an in-doubt call known to be safe to run again, under the
        current lease's fence (the new attempt is ours)."""
        crashpoints.hit("ledger.before_intent")
        fence = self._fence()
        again = entry.replace(status="pending", attempts=entry.attempts + 1, updated_at=clock.wall(), fence=fence)
        self.store.ledger_put(again, fence=fence)
        crashpoints.hit("ledger.after_intent")
        return again

    def mark_unknown(self, entry: LedgerEntry) -> LedgerEntry:
        unknown = entry.replace(status="unknown", updated_at=clock.wall())
        self.store.ledger_put(unknown, fence=self._fence())
        return unknown

    @staticmethod
    def outcome(entry: LedgerEntry, result: ToolResult) -> LedgerEntry:
        """The entry to save with the run's record once the tool has returned."""
        status: LedgerStatus = "failed" if result.is_error else "succeeded"
        return entry.replace(status=status, result=result, updated_at=clock.wall())

    def get(self, key: str) -> LedgerEntry | None:
        return self.store.ledger_get(self.run_id, key)

    def wait_settled(self, key: str, timeout: float, poll: float = 0.05) -> LedgerEntry | None:
        """Wait for another executor of ``key`` to record its outcome (or declare it
        unknown); returns the entry as it then stands, or as it stood at ``timeout``."""
        deadline = clock.monotonic() + timeout
        while True:
            entry = self.get(key)
            if entry is not None and entry.status != "pending":
                return entry
            if clock.monotonic() >= deadline:
                return entry
            clock.sleep(poll)

    def run_once(self, call: ToolCall, execute: Callable[[], ToolResult], *, wait: float = 30.0) -> ToolResult:
        """Run ``execute`` at most once for ``call.idempotency_key`` across threads and
        processes: the winner of the claim runs it and records the outcome; anyone else gets
        the recorded result (waiting up to ``wait`` seconds for it) or an unknown-outcome error."""
        claim = self.claim(call)
        if claim.outcome == "settled":
            assert claim.entry.result is not None
            return claim.entry.result.replace(call_id=call.id, how="reused")
        if claim.outcome == "in_doubt":
            settled = self.wait_settled(call.idempotency_key, wait)
            if settled is not None and settled.result is not None and settled.status in ("succeeded", "failed"):
                return settled.result.replace(call_id=call.id, how="reused")
            return unknown_result(call)
        try:
            result = execute()
        except Exception:
            # It may have acted before raising: say so now rather than leave waiters in doubt.
            self.mark_unknown(claim.entry)
            raise
        self.store.ledger_put(self.outcome(claim.entry, result), fence=self._fence())
        return result


def not_settled_result(call: ToolCall) -> ToolResult:
    """The ``is_error`` result for a call left unreconciled because the run stopped (policy
    ``fail``): it was not run again, and any earlier attempt was not checked."""
    text = (
        f"NOT SETTLED: the run stopped before the call to {call.name} (call id {call.id}) was reconciled "
        "after a crash. It was not run again; whether an earlier attempt took effect was not checked."
    )
    return ToolResult(call_id=call.id, content=text, is_error=True, how="skipped")


def unknown_result(call: ToolCall, reason: str = "") -> ToolResult:
    """The ``is_error`` result the model gets when a side effect's outcome cannot be known."""
    detail = f" ({reason})" if reason else ""
    text = (
        f"UNKNOWN OUTCOME: the call to {call.name} (call id {call.id}, idempotency key "
        f"{call.idempotency_key}) was interrupted (a crash, a timeout) before its result was recorded. "
        f"It may or may not have taken effect{detail}. Do not assume either: verify whether it "
        "happened (for example by reading back what it would have changed) before trying it again."
    )
    return ToolResult(call_id=call.id, content=text, is_error=True, how="unknown")
