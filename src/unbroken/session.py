"""A run as one process holds it: its state, lease, encoder and ledger, and every durable
step (open, save A, record a result, save B, unknown outcomes, repair, compaction).

``Agent.run`` and ``Agent.arun`` (``runner.py``) drive a ``RunSession``; they differ only in
how the model and the tools are awaited.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from . import crashpoints
from .codec import Encoder, encode_full, ensure_json
from .errors import ConfigError, IncompatibleSchema, ModelCallFailed, RunInterrupted, RunNotFound, TaskMismatch
from .leases import Heartbeat
from .ledger import EffectLedger, not_settled_result, unknown_result
from .model import ModelTurn, ProposedCall, add_usage
from .reconcile import Decision
from .state import JSONValue, Lease, LedgerEntry, RunState, ToolCall, ToolResult, idempotency_key

if TYPE_CHECKING:
    from .runner import Agent

log = logging.getLogger("unbroken")


@dataclass
class RunResult:
    """How a call to ``Agent.run`` ended. ``status`` is the run's phase: ``completed``,
    ``max_turns``, ``paused`` (an unknown outcome waits for ``unbroken resolve``) or ``failed``."""

    run_id: str
    status: str
    output: str | None
    turns: int
    tokens_used: int
    resumed: bool = False
    resume_seconds: float | None = None
    reconciled: list[tuple[str, str, str]] = field(default_factory=list)
    recovered_from: str | None = None
    state: RunState | None = None


class RunSession:
    """One process's hold on one run: its state, lease, encoder and ledger. Every durable
    step of a run goes through here; ``Agent.run`` and ``Agent.arun`` only drive it."""

    def __init__(self, agent: Agent, run_id: str, lease: Lease, heartbeat: Heartbeat) -> None:
        self.agent = agent
        self.store = agent.store
        self.run_id = run_id
        self.heartbeat = heartbeat
        self.lease = lease
        self.encoder = Encoder(
            agent.snapshot_every, messages_are_json=getattr(agent.model, "messages_are_json", False) is True
        )
        self.ledger = EffectLedger(self.store, run_id, self.fence)
        self.state: RunState
        self.resumed = False
        self.recovered_from: str | None = None
        self.reconciled: list[tuple[str, str, str]] = []
        self.repaired: set[str] = set()
        self.checked_upto = 0  # messages before this index were checked (and the history only grows)

    def fence(self) -> int:
        return self.lease.fence

    # ------------------------------------------------------------------ open

    def open(self, task: str | None, business_state: Mapping[str, JSONValue] | None) -> None:
        try:
            decoded = self.store.decode(self.run_id, recover=True)
        except RunNotFound:
            if task is None:
                raise
            self._start(task, business_state)
            return
        state = decoded.state
        if task is not None and state.task != task:
            raise TaskMismatch(
                f"run {self.run_id!r} already exists with task {state.task[:80]!r}; pass the same task "
                "(or task=None) to resume it, or use another run id"
            )
        if state.provider != self.agent.model.provider:
            raise ConfigError(
                f"run {self.run_id!r} holds {state.provider} messages; this agent's model speaks "
                f"{self.agent.model.provider}. Resume it with a {state.provider} model."
            )
        self.resumed = True
        self.state = state
        rewrite_reason = None
        if decoded.problem is not None:
            self.recovered_from = decoded.problem
            log.warning("%s; continuing from save point %s", decoded.problem, decoded.last_seq)
            rewrite_reason = "recovered"
        elif decoded.migrated_from is not None:
            rewrite_reason = f"migrated from schema {decoded.migrated_from}"
        if rewrite_reason is not None:
            head = self.store.read_records(self.run_id)[-1].seq
            state.save_seq = max(head, decoded.last_seq) + 1
            state.updated_at = time.time()
            self.store.rewrite(self.run_id, [encode_full(state, rewrite_reason)], expect_seq=head, fence=self.fence())
        self.encoder.prime(state)
        if self._migrate_business_state():
            # The migrated value and its new version are saved together, at once: a later
            # load must never see new-shaped data under the old version number.
            self.save("business_state_migrated")

    def _start(self, task: str, business_state: Mapping[str, JSONValue] | None) -> None:
        initial = dict(business_state or {})
        ensure_json(initial, "business_state")
        self.state = RunState(
            run_id=self.run_id,
            task=task,
            provider=self.agent.model.provider,
            messages=list(self.agent.model.start_messages(task)),
            business_state=initial,
            business_state_version=self.agent.business_state_version,
        )
        self.save("start", force_snapshot=True)

    def _migrate_business_state(self) -> bool:
        """Upgrade ``business_state`` to the agent's version; True if anything changed. The
        whole chain of steps is checked before the first one runs."""
        state = self.state
        wanted = self.agent.business_state_version
        if state.business_state_version > wanted:
            raise IncompatibleSchema(
                f"run {self.run_id!r} has business_state version {state.business_state_version}, newer than "
                f"this agent's {wanted}; run it with the newer code (nothing was changed)"
            )
        missing = [
            version
            for version in range(state.business_state_version, wanted)
            if version not in self.agent.business_state_migrations
        ]
        if missing:
            raise IncompatibleSchema(
                f"run {self.run_id!r} has business_state version {state.business_state_version} and no "
                f"migration from version {missing[0]} to {missing[0] + 1} was given to the Agent "
                "(business_state_migrations); nothing was changed"
            )
        if state.business_state_version == wanted:
            return False
        business_state = dict(state.business_state)
        for version in range(state.business_state_version, wanted):
            business_state = self.agent.business_state_migrations[version](business_state)
        state.business_state = business_state
        state.business_state_version = wanted
        return True

    # ------------------------------------------------------------------ saving

    def save(self, label: str, *, ledger: Iterable[LedgerEntry] = (), force_snapshot: bool = False) -> None:
        """One durable save point: one atomic append, conditional on our fence."""
        state = self.state
        previous = state.save_seq
        state.save_seq = previous + 1
        state.updated_at = time.time()
        try:
            encoded = self.encoder.encode(state, label, force_snapshot=force_snapshot, ledger=tuple(ledger))
            crashpoints.hit(f"save.{label}.before")
            self.store.append(encoded, expect_seq=previous, fence=self.fence())
        except BaseException:
            state.save_seq = previous
            raise
        self.encoder.committed(state, encoded)
        crashpoints.hit(f"save.{label}.after")
        if self.agent.stop_requested.is_set() and not state.finished:
            raise RunInterrupted(f"run {self.run_id!r} stopped at save point {state.save_seq} on request; resume it")

    # ------------------------------------------------------------------ turn bookkeeping

    def record_turn(self, turn: ModelTurn) -> None:
        """Save point A: the model's answer and its calls (pending), before any tool runs."""
        state = self.state
        state.turns += 1
        state.tokens_used += int(turn.tokens)
        state.usage = add_usage(state.usage, turn.usage)
        state.messages.extend(turn.messages)
        calls = [self.to_tool_call(proposed) for proposed in turn.tool_calls]
        state.pending_calls = calls
        state.results = {}
        state.resolutions = {}
        if calls:
            state.phase = "running_tools"
            self.save("model_turn")
        elif turn.done:
            state.phase = "completed"
            state.output = turn.text
            self.save("completed")
        else:
            self.save("model_turn")

    def to_tool_call(self, proposed: ProposedCall) -> ToolCall:
        error = proposed.error
        if error is None and proposed.name not in self.agent.tools:
            error = f"there is no tool named {proposed.name!r}; available: {', '.join(self.agent.tools) or 'none'}"
        return ToolCall(
            id=proposed.id,
            name=proposed.name,
            input=proposed.input,
            idempotency_key=idempotency_key(self.run_id, proposed.id),
            error=error,
        )

    def repair_dangling(self) -> bool:
        """Validate before send: a tool call in the history with no result, that is not already a
        pending call, is made pending again (read back from its message) so that reconcile answers
        it; it is never dropped. Returns True when there is something to reconcile (saved first)."""
        state = self.state
        model = self.agent.model
        pending = {call.id for call in state.pending_calls}
        missing = [
            call_id
            for call_id in model.dangling_call_ids(state.messages[self.checked_upto :])
            if call_id not in pending and call_id not in self.repaired
        ]
        if not missing:
            self.checked_upto = len(state.messages)
            return False
        self.repaired.update(missing)
        find_calls = getattr(model, "find_calls", None)
        found = {call.id: call for call in find_calls(state.messages, missing)} if find_calls is not None else {}
        for call_id in missing:
            proposed = found.get(call_id) or ProposedCall(
                call_id, "", {}, error="the call could not be read back from the history"
            )
            state.pending_calls.append(self.to_tool_call(proposed))
        log.warning(
            "run %s: %d tool call(s) had no result in the history; reconciling %s",
            self.run_id,
            len(missing),
            ", ".join(missing),
        )
        state.phase = "running_tools"
        self.save("repaired")
        return True

    def compact(self) -> None:
        """Compaction before a model call; the new summary is its own save point."""
        compaction = self.agent.compaction
        if compaction is None:
            return
        try:
            changed = compaction.compact(self.state, self.agent.model)
        except Exception as exc:
            raise self.compaction_failed(exc) from exc
        if changed:
            self.save("compacted")

    async def acompact(self) -> None:
        compaction = self.agent.compaction
        if compaction is None:
            return
        try:
            changed = await compaction.acompact(self.state, self.agent.model)
        except Exception as exc:
            raise self.compaction_failed(exc) from exc
        if changed:
            self.save("compacted")

    def compaction_failed(self, exc: Exception) -> ModelCallFailed:
        return ModelCallFailed(
            f"the summary call compacting run {self.run_id!r} failed ({type(exc).__name__}: {exc}); the run is "
            f"saved at save point {self.state.save_seq} and resumes from there"
        )

    def record_result(self, call: ToolCall, result: ToolResult, entry: LedgerEntry | None) -> None:
        """Make one tool result durable (with its ledger outcome, atomically). The save that
        records the turn's last result also appends the provider's tool-result message(s): B."""
        state = self.state
        state.results[call.id] = result
        ledger = (entry,) if entry is not None else ()
        if state.dangling_calls():
            self.save("tool_result", ledger=ledger)
        else:
            self.finish_tools(ledger)

    def finish_tools(self, ledger: Sequence[LedgerEntry] = ()) -> None:
        state = self.state
        ordered = [state.results[call.id] for call in state.pending_calls]
        state.messages.extend(self.agent.model.tool_result_messages(state.pending_calls, ordered))
        state.pending_calls = []
        state.results = {}
        state.resolutions = {}
        state.phase = "awaiting_model"
        self.save("tools_done", ledger=ledger)

    def handle_unknown(self, call: ToolCall, decision: Decision) -> bool:
        """Apply the unknown-outcome policy. Returns False when the run must stop here."""
        assert decision.entry is not None
        entry = replace(decision.entry, status="unknown", updated_at=time.time())
        policy = self.agent.unknown_policy
        self.reconciled.append((call.id, call.name, "unknown"))
        if policy == "tell_model":
            self.record_result(call, unknown_result(call, decision.reason), entry)
            return True
        state = self.state
        if policy == "pause":
            if state.phase == "paused":
                return False
            state.phase = "paused"
            state.error = f"call {call.id} ({call.name}) has an unknown outcome; settle it with `unbroken resolve`"
            self.save("paused", ledger=(entry,))
            return False
        # The run ends here, but its history must stay one a provider accepts: every tool_use
        # gets a tool_result (the unknown one says so; calls not yet reconciled say that).
        state.results[call.id] = unknown_result(call, decision.reason)
        for other in state.dangling_calls():
            state.results[other.id] = not_settled_result(other)
        ordered = [state.results[pending.id] for pending in state.pending_calls]
        state.messages.extend(self.agent.model.tool_result_messages(state.pending_calls, ordered))
        state.pending_calls = []
        state.results = {}
        state.resolutions = {}
        state.phase = "failed"
        state.error = f"call {call.id} ({call.name}) has an unknown outcome ({decision.reason}); run failed by policy"
        self.save("failed", ledger=(entry,))
        return False

    def stop_for_max_turns(self) -> None:
        self.state.phase = "max_turns"
        self.save("max_turns")

    def result(self, resume_seconds: float | None) -> RunResult:
        state = self.state
        return RunResult(
            run_id=self.run_id,
            status=state.phase,
            output=state.output,
            turns=state.turns,
            tokens_used=state.tokens_used,
            resumed=self.resumed,
            resume_seconds=resume_seconds,
            reconciled=list(self.reconciled),
            recovered_from=self.recovered_from,
            state=state,
        )
