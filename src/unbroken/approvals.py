"""Human approval before a tool runs.

A tool declared with ``@tool(approval=True)`` (or ``approval=lambda call: ...``, deciding per
call) never runs before a person said yes to that exact call:

1. **Request.** Before any call of a turn starts, the engine records a request for each call
   that needs one (``state.approvals[key]``: the call, a digest of its tool and arguments, when
   it was asked, when it expires), sets the phase ``awaiting_approval`` and saves a full
   snapshot (label ``approval_requested``). ``run``/``arun`` return with that status.
2. **Decision.** ``approve`` / ``deny`` (``unbroken.ops``, ``unbroken approve|deny``) take the
   run's lease, check the request (same run, same call occurrence, same argument digest, not
   expired) and record the decision in one save (label ``approval_decided``).
3. **Resume.** An approved call takes the usual path (ledger intent, execute, record), so a
   crash while it executes is settled like any other call: never run twice. A denied call is
   answered with an ``is_error`` result carrying the reason. A request still open stops the
   run again; an expired one (``approval_ttl``) is asked again.

Requests are keyed by the call's idempotency key (one per occurrence), so a decision can never
apply to another call, and its digest binds it to the arguments it was given for.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from . import clock, crashpoints, emitters
from ._log import log
from ._plain import Frozen
from .codec import Encoder, canonical_hash
from .errors import ApprovalError, ApprovalExpired, ConfigError
from .leases import acquire, make_owner
from .reconcile import Decision
from .redact import log_failure
from .state import JSONValue, RunState, ToolCall, ToolResult, check_run_id
from .tools import Tool

if TYPE_CHECKING:
    from .session import RunSession
    from .stores.base import Store


ApprovalStatus = Literal["requested", "approved", "denied"]


def args_digest(call: ToolCall) -> str:
    """What a decision is bound to: the tool and its arguments, independent of key order."""
    return "sha256:" + canonical_hash({"tool": call.name, "input": call.input})


class ApprovalRequest(Frozen):
    """One approval request of a run, as stored (``status``: requested, approved or denied)."""

    __slots__ = (
        "by",
        "call_id",
        "decided_at",
        "digest",
        "expires_at",
        "input",
        "key",
        "reason",
        "requested_at",
        "run_id",
        "status",
        "tool",
    )
    run_id: str
    call_id: str
    key: str
    tool: str
    input: dict[str, JSONValue]
    digest: str
    status: ApprovalStatus
    requested_at: float
    expires_at: float | None
    decided_at: float | None
    reason: str | None
    by: str | None

    def __init__(
        self,
        run_id: str,
        call_id: str,
        key: str,
        tool: str,
        input: dict[str, JSONValue],
        digest: str,
        status: ApprovalStatus,
        requested_at: float,
        expires_at: float | None,
        decided_at: float | None = None,
        reason: str | None = None,
        by: str | None = None,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "run_id", run_id)
        set_field(self, "call_id", call_id)
        set_field(self, "key", key)
        set_field(self, "tool", tool)
        set_field(self, "input", input)
        set_field(self, "digest", digest)
        set_field(self, "status", status)
        set_field(self, "requested_at", requested_at)
        set_field(self, "expires_at", expires_at)
        set_field(self, "decided_at", decided_at)
        set_field(self, "reason", reason)
        set_field(self, "by", by)

    @classmethod
    def of(cls, run_id: str, call: ToolCall, record: dict[str, JSONValue]) -> ApprovalRequest:
        return cls(
            run_id=run_id,
            call_id=call.id,
            key=call.idempotency_key,
            tool=call.name,
            input=call.input,
            digest=str(record["digest"]),
            status=record["status"],
            requested_at=float(record["requested_at"]),
            expires_at=record.get("expires_at"),
            decided_at=record.get("decided_at"),
            reason=record.get("reason"),
            by=record.get("by"),
        )


# --------------------------------------------------------------------------- the engine's side


def needs_approval(tool: Tool, call: ToolCall) -> bool:
    """Whether ``tool``'s rule asks for approval of ``call``; a rule that raises asks."""
    rule = tool.approval
    if isinstance(rule, bool):
        return rule
    try:
        return bool(rule(call))
    except Exception as exc:
        log_failure(log, f"approval rule of tool {tool.name} raised (asking a person)", exc)
        return True


def gate(session: RunSession, calls: list[ToolCall]) -> bool:
    """Before any of ``calls`` starts: record a request for each call that needs approval and
    has no valid one, and stop the run (saved, ``awaiting_approval``) while any is undecided.
    True when the calls may be settled now (each gated call approved or denied)."""
    state = session.state
    now = clock.wall()
    keys = {call.idempotency_key for call in state.pending_calls}
    approvals = {key: record for key, record in (state.approvals or {}).items() if key in keys}
    asked: list[ToolCall] = []
    waiting: list[ToolCall] = []
    for call in calls:
        tool = session.agent.tools.get(call.name)
        record = approvals.get(call.idempotency_key)
        if call.error is not None or tool is None or (record is None and not needs_approval(tool, call)):
            continue
        if record is not None and _still_valid(session, record, call, now):
            if record["status"] == "requested":
                waiting.append(call)
            continue
        approvals[call.idempotency_key] = _request(call, tool, now)
        asked.append(call)
    if state.approvals is not None or approvals:
        state.approvals = approvals  # decisions of earlier turns are dropped here (they are in the history)
    if not asked and not waiting:
        if state.phase == "awaiting_approval":
            state.phase = "running_tools"
        return True
    if asked or state.phase != "awaiting_approval":
        state.phase = "awaiting_approval"
        session.save("approval_requested", force_snapshot=True)
    for call in asked:
        emitters.approval_requested(session, call, approvals[call.idempotency_key])
    return False


def answer(session: RunSession, call: ToolCall) -> Decision | None:
    """The decision for a denied call (an ``is_error`` result with the reason), else None."""
    record = (session.state.approvals or {}).get(call.idempotency_key)
    if record is None or record.get("status") != "denied" or record.get("digest") != args_digest(call):
        return None
    reason = record.get("reason") or "no reason given"
    text = f"DENIED: a person denied the call to {call.name} (call id {call.id}): {reason}. It was not executed."
    return Decision("answer", ToolResult(call.id, text, True, "denied"))


def _request(call: ToolCall, tool: Tool, now: float) -> dict[str, JSONValue]:
    return {
        "call_id": call.id,
        "tool": call.name,
        "digest": args_digest(call),
        "status": "requested",
        "requested_at": now,
        "expires_at": now + tool.approval_ttl if tool.approval_ttl is not None else None,
    }


def _still_valid(session: RunSession, record: dict[str, JSONValue], call: ToolCall, now: float) -> bool:
    """A stored request or decision still stands for ``call``. A decision bound to other
    arguments never does; an expired one does only if the approved call already started (its
    ledger intent exists): from then on the ledger settles it, it is never asked again."""
    if record.get("digest") != args_digest(call):
        return False
    if record.get("status") == "denied":
        return True
    expires_at = record.get("expires_at")
    if expires_at is None or now <= float(expires_at):
        return True
    return record.get("status") == "approved" and session.ledger.get(call.idempotency_key) is not None


# --------------------------------------------------------------------------- the person's side


def pending_approvals(store: Store, run_id: str) -> list[ApprovalRequest]:
    """Every approval request of the run's current turn (open and decided), in call order.
    Reads only: the run's tail (its newest snapshot and the deltas after it, where the current
    turn's calls are), never its whole history; damage there raises as ``store.load`` would."""
    from .paging import read_tail

    state = read_tail(store, run_id).state
    approvals = state.approvals or {}
    return [
        ApprovalRequest.of(run_id, call, approvals[call.idempotency_key])
        for call in state.pending_calls
        if call.idempotency_key in approvals
    ]


def decide(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    digest: str | None = None,
    by: str | None = None,
) -> ApprovalRequest:
    """Record a person's decision on an open request of ``run_id`` for ``call_id`` (the
    provider's call id or the call's idempotency key). ``digest``, if given, must be the one
    the person was shown. Durable when it returns; refused while another process holds the
    run (``LeaseHeld``); nothing is recorded when it raises."""
    check_run_id(run_id)
    if not approved and not (reason and reason.strip()):
        raise ConfigError("a denial needs a reason: the model is told it")
    lease = acquire(store, run_id, make_owner(), 30.0)
    try:
        from .paging import read_tail

        state = read_tail(store, run_id).state  # the tail: the open requests are in its small fields
        encoder = Encoder()
        encoder.prime(state)  # what the store holds: the save below writes only what changes
        call, record = _open_request(state, call_id)
        bound = args_digest(call)
        if record.get("digest") != bound:
            raise ApprovalError(
                f"the request for call {call.id} of run {run_id!r} was made for other arguments than the call "
                "now holds; nothing was recorded. Resume the run to ask again"
            )
        if digest is not None and digest != bound:
            raise ApprovalError(
                f"call {call.id} of run {run_id!r} has argument digest {bound}, not {digest}: the arguments "
                "are not the ones you were shown; nothing was recorded"
            )
        now = clock.wall()
        expires_at = record.get("expires_at")
        if expires_at is not None and now > float(expires_at):
            raise ApprovalExpired(
                f"the approval request for call {call.id} of run {run_id!r} expired at {time.ctime(float(expires_at))} "
                "(its tool's approval_ttl); nothing was recorded. Resume the run to ask again"
            )
        assert state.approvals is not None
        decided: dict[str, JSONValue] = {
            **record,
            "status": "approved" if approved else "denied",
            "decided_at": now,
            "reason": reason,
            "by": by,
        }
        state.approvals[call.idempotency_key] = decided
        if not any(item.get("status") == "requested" for item in state.approvals.values()):
            state.phase = "running_tools"  # every request is decided: a resume (or a worker) goes on
        state.save_seq += 1
        state.updated_at = now
        encoded = encoder.encode(state, "approval_decided")
        crashpoints.hit("save.approval_decided.before")
        store.append(encoded, expect_seq=state.save_seq - 1, fence=lease.fence)
        crashpoints.hit("save.approval_decided.after")
        return ApprovalRequest.of(run_id, call, decided)
    finally:
        store.release_lease(lease)


def _open_request(state: RunState, call_id: str) -> tuple[ToolCall, dict[str, JSONValue]]:
    approvals = state.approvals or {}
    matches = [
        (call, record)
        for call in state.pending_calls
        if call_id in (call.id, call.idempotency_key)
        and (record := approvals.get(call.idempotency_key)) is not None
        and record.get("status") == "requested"
    ]
    if len(matches) > 1:
        # A provider that repeats ids in one turn: deciding by id could approve arguments nobody saw.
        keys = ", ".join(f"{call.idempotency_key} ({call.input})" for call, _ in matches)
        raise ApprovalError(
            f"{len(matches)} open requests of run {state.run_id!r} share the call id {call_id!r}; nothing was "
            f"recorded. Name one by its idempotency key: {keys}"
        )
    if matches:
        return matches[0]
    waiting = [
        call.id for call in state.pending_calls if approvals.get(call.idempotency_key, {}).get("status") == "requested"
    ]
    raise ApprovalError(
        f"run {state.run_id!r} has no open approval request for call {call_id!r}; open requests: "
        f"{', '.join(waiting) or 'none'}"
    )
