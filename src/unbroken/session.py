"""A run as one process holds it: its state, lease, encoder and ledger, and every durable
step (open, save A, record a result, save B, unknown outcomes, repair, compaction).

The order of those steps is the engine's (``engine.py``); ``Agent.run`` and ``Agent.arun``
only drive it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from . import clock, crashpoints, emitters, usage
from ._log import log
from ._plain import Plain
from .codec import LAYOUT_ONLY, MAX_RECORD_BYTES, EncodedSave, Encoder, encode_full, ensure_json
from .errors import (
    ConfigError,
    IncompatibleSchema,
    ModelCallFailed,
    RecordTooLarge,
    RunInterrupted,
    RunNotFound,
    TaskMismatch,
)
from .leases import Heartbeat
from .ledger import EffectLedger, not_settled_result, unknown_result
from .missing import check_never_saved
from .model import HistoryReader, ModelTurn, ProposedCall, messages_are_json
from .state import (
    SCHEMA_VERSION,
    JSONValue,
    Lease,
    LedgerEntry,
    Resumption,
    RunState,
    Settlement,
    ToolCall,
    ToolResult,
    occurrence_key,
)
from .stores.base import Store
from .window import load_window

if TYPE_CHECKING:
    from .reconcile import Decision
    from .runner import Agent


HISTORY_CHECK_STEP = 64
"""``RunState.history_checked`` moves in steps of at least this many messages: a resume scans at
most this many more than it must, and most save records do not carry the marker."""


class RunResult(Plain):
    """How a call to ``Agent.run`` ended. ``status`` is the run's phase: ``completed``,
    ``max_turns``, ``paused`` (an unknown outcome waits for ``unbroken resolve``) or ``failed``."""

    __slots__ = (
        "output",
        "reconciled",
        "recovered_from",
        "resume_seconds",
        "resumed",
        "run_id",
        "state",
        "status",
        "tokens_used",
        "turns",
    )
    _not_shown = frozenset({"state"})  # the whole history: kept out of print(result)
    run_id: str
    status: str
    output: str | None
    turns: int
    tokens_used: int
    resumed: bool
    resume_seconds: float | None
    reconciled: list[tuple[str, str, str]]
    recovered_from: str | None
    state: RunState | None

    def __init__(
        self,
        run_id: str,
        status: str,
        output: str | None,
        turns: int,
        tokens_used: int,
        resumed: bool = False,
        resume_seconds: float | None = None,
        reconciled: list[tuple[str, str, str]] | None = None,
        recovered_from: str | None = None,
        state: RunState | None = None,
    ) -> None:
        self.run_id = run_id
        self.status = status
        self.output = output
        self.turns = turns
        self.tokens_used = tokens_used
        self.resumed = resumed
        self.resume_seconds = resume_seconds
        self.reconciled = [] if reconciled is None else reconciled
        self.recovered_from = recovered_from
        self.state = state


class RunSession:
    """One process's hold on one run: its state, lease, encoder and ledger. Every durable
    step of a run goes through here; ``Agent.run`` and ``Agent.arun`` only drive it."""

    def __init__(
        self,
        agent: Agent,
        run_id: str,
        lease: Lease,
        heartbeat: Heartbeat,
        *,
        store: Store,
        stop: threading.Event,
        started: float,
    ) -> None:
        self.agent = agent
        self.store = store
        self.stop = stop
        self.started = started
        self.resume_seconds: float | None = None
        self.run_id = run_id
        self.heartbeat = heartbeat
        self.lease = lease
        self.encoder = Encoder(agent.snapshot_every, messages_are_json=messages_are_json(agent.model))
        self.ledger = EffectLedger(self.store, run_id, self.fence)
        self.state: RunState
        self.resumed = False
        self.recovered_from: str | None = None
        self.reconciled: list[tuple[str, str, str]] = []
        self.repaired: set[tuple[int, str, int]] = set()  # (turn's first message, call id, n-th of that id)
        self.checked_upto = 0  # messages before this index were checked (and the history only grows)

    def fence(self) -> int:
        return self.lease.fence

    def since_start(self) -> float | None:
        """Seconds since the run call began, for a resumed run (how long load + reconcile took)."""
        return time.perf_counter() - self.started if self.resumed else None

    # ------------------------------------------------------------------ open

    def open(self, task: str | None, business_state: Mapping[str, JSONValue] | None) -> None:
        try:
            # Strict: a damaged run is a CorruptCheckpoint for the operator (``unbroken recover``),
            # never silently rewritten here.
            # A compacted run is read from its tail only (speed+scale, issue 16): the snapshot and
            # the window; anything else is the whole-run store.decode, as before.
            decoded = load_window(self.store, self.run_id)
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
        self.resumed = not state.finished  # a finished run is returned as stored, not resumed
        self.state = state
        rewrite_reason = None
        if decoded.migrated_from is not None:
            rewrite_reason = f"migrated from schema {decoded.migrated_from}"
        if rewrite_reason is not None:
            head = self.store.read_records(self.run_id)[-1].seq
            state.save_seq = max(head, decoded.last_seq) + 1
            state.updated_at = clock.wall()
            self.store.rewrite(self.run_id, [encode_full(state, rewrite_reason)], expect_seq=head, fence=self.fence())
        self.encoder.prime(state)
        if state.schema_version in LAYOUT_ONLY:  # read as it is; saved from now on at the current schema
            state.schema_version = SCHEMA_VERSION
        # Nothing before the compaction window is unanswered, nor before the persisted marker.
        self.checked_upto = max(decoded.message_base, min(state.history_checked, len(state.messages)))
        if self._migrate_business_state():
            # The migrated value and its new version are saved together, at once: a later
            # load must never see new-shaped data under the old version number.
            self.save("business_state_migrated")

    def _start(self, task: str, business_state: Mapping[str, JSONValue] | None) -> None:
        initial = dict(business_state or {})
        ensure_json(initial, "business_state")
        check_never_saved(self.store, self.run_id)  # a run the store lost is never started over
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

    def save(
        self,
        label: str,
        *,
        ledger: Iterable[LedgerEntry] = (),
        force_snapshot: bool = False,
        settled: Sequence[Settlement] = (),
        resumed: Resumption | None = None,
    ) -> None:
        """One durable save point: one atomic append, conditional on our fence. ``settled``
        and ``resumed`` are the record's account (how its calls were settled, what a resume
        found), written in the same record."""
        state = self.state
        previous = state.save_seq
        state.save_seq = previous + 1
        state.updated_at = clock.wall()
        account = _account(settled, resumed) if settled or resumed is not None else None
        try:
            encoded = self.encoder.encode(
                state, label, force_snapshot=force_snapshot, ledger=tuple(ledger), account=account
            )
            check_size(encoded)
            crashpoints.hit(f"save.{label}.before")
            self.store.append(encoded, expect_seq=previous, fence=self.lease.fence)  # (self.fence())
        except BaseException:
            state.save_seq = previous
            raise
        self.encoder.committed(state, encoded)
        crashpoints.hit(f"save.{label}.after")
        emitters.save_point(self, label)  # no-op without hooks
        if self.stop.is_set() and not state.finished:
            raise RunInterrupted(f"run {self.run_id!r} stopped at save point {state.save_seq} on request; resume it")

    def record_resume(self) -> None:
        """The first save of a resumed run says what the resume found (the phase the previous
        process left the run in, the calls left without a result) and counts it: one record
        per resume, a crash during a model call included."""
        state = self.state
        found = Resumption(
            phase=state.phase,
            last_seq=state.save_seq,
            dangling=len(state.dangling_calls()),
            calls=len(state.pending_calls),
            by_hand=len(state.resolutions) + sum(1 for result in state.results.values() if result.how == "resolved"),
        )
        state.resumes += 1
        self.save("resumed", resumed=found)

    # ------------------------------------------------------------------ turn bookkeeping

    def record_turn(self, turn: ModelTurn) -> None:
        """Save point A: the model's answer and its calls (pending), before any tool runs."""
        state = self.state
        state.turns += 1
        state.tokens_used, state.usage = usage.account_turn(state.tokens_used, state.usage, turn.tokens, turn.usage)
        state.messages.extend(turn.messages)
        calls = [self.to_tool_call(proposed, position) for position, proposed in enumerate(turn.tool_calls)]
        state.pending_calls = calls
        # Calls past max_calls_per_turn are answered here, in save A itself: one save for all of
        # them, not one each (10,000 calls in a turn must not cost 10,000 saves).
        over = calls[self.agent.max_calls_per_turn :]
        if over:
            from .reconcile import refused  # (reconcile is loaded when a call is first settled)

            state.results = {call.idempotency_key: refused(call) for call in over}
        else:
            state.results = {}
        state.resolutions = {}
        state.attempts = {}
        if calls:
            state.phase = "running_tools"
            self.save("model_turn")
        elif turn.done:
            state.phase = "completed"
            state.output = turn.text
            self.save("completed")
        else:
            self.save("model_turn")

    def to_tool_call(self, proposed: ProposedCall, position: int) -> ToolCall:
        """A call as saved at save A, keyed by its occurrence: the save it is recorded in (the
        next one), its position there and the provider's id (which a provider may reuse)."""
        error = over_call_cap(position, self.agent.max_calls_per_turn) or proposed.error
        if error is None and proposed.name not in self.agent.tools:
            error = f"there is no tool named {proposed.name!r}; available: {', '.join(self.agent.tools) or 'none'}"
        return ToolCall(
            id=proposed.id,
            name=proposed.name,
            input=proposed.input,
            idempotency_key=occurrence_key(self.run_id, self.state.save_seq + 1, position, proposed.id),
            error=error,
        )

    def repair_dangling(self) -> bool:
        """Validate before send: a tool call in the history with no result, that is not already a
        pending call, is made pending again (read back from its message) so that reconcile answers
        it; it is never dropped. Returns True when there is something to reconcile (saved first).
        Calls are told apart by occurrence (their turn's place in the history, their id and how
        often that id came before in the turn), never by id alone: providers reuse ids."""
        state = self.state
        model = self.agent.model
        base = self.checked_upto
        tail = state.messages[base:]
        if not model.dangling_call_ids(tail):  # the usual case: one pass, nothing to tell apart
            self._checked(len(state.messages))
            return False
        reader = model if isinstance(model, HistoryReader) else None
        bounds = (
            [0, *(start for start in reader.turn_starts(tail) if start > 0), len(tail)] if reader else [0, len(tail)]
        )
        pending = Counter(call.id for call in state.pending_calls)
        repaired: list[list[ProposedCall]] = []
        for start, end in reversed(list(itertools.pairwise(bounds))):  # pending calls are the newest turn's
            chunk = tail[start:end]
            seen: Counter[str] = Counter()
            ids: list[str] = []
            for call_id in model.dangling_call_ids(chunk):
                occurrence = (base + start, call_id, seen[call_id])
                seen[call_id] += 1
                if pending[call_id] > 0:
                    pending[call_id] -= 1
                elif occurrence not in self.repaired:
                    self.repaired.add(occurrence)
                    ids.append(call_id)
            if ids:
                found = {call.id: call for call in reader.find_calls(chunk, ids)} if reader else {}
                lost = "the call could not be read back from the history"
                repaired.append([found.get(call_id) or ProposedCall(call_id, "", {}, error=lost) for call_id in ids])
        if not repaired:
            self._checked(len(state.messages))
            return False
        missing = [proposed for turn in reversed(repaired) for proposed in turn]  # in history order
        for proposed in missing:
            state.pending_calls.append(self.to_tool_call(proposed, len(state.pending_calls)))
        log.warning(
            "run %s: %d tool call(s) had no result in the history; reconciling %s",
            self.run_id,
            len(missing),
            ", ".join(proposed.id for proposed in missing),
        )
        state.phase = "running_tools"
        self.save("repaired")
        return True

    def _checked(self, upto: int) -> None:
        """Messages before ``upto`` hold no unanswered call other than the pending ones. The marker
        is also kept in the state (saved with the next save point, so a resumed process scans only
        from it), moved forward every ``HISTORY_CHECK_STEP`` messages to keep records small."""
        self.checked_upto = upto
        if upto - self.state.history_checked >= HISTORY_CHECK_STEP:
            self.state.history_checked = upto

    def compaction_failed(self, exc: Exception) -> ModelCallFailed:
        return ModelCallFailed(
            f"the summary call compacting run {self.run_id!r} failed ({type(exc).__name__}: {exc}); the run is "
            f"saved at save point {self.state.save_seq} and resumes from there"
        )

    def record_result(
        self, call: ToolCall, result: ToolResult, entry: LedgerEntry | None, settlement: Settlement | None = None
    ) -> None:
        """Make one tool result durable (with its ledger outcome and how it was settled,
        atomically). The save that records the turn's last result also appends the provider's
        tool-result message(s): B."""
        state = self.state
        state.results[call.idempotency_key] = result
        ledger = (entry,) if entry is not None else ()
        settled = (settlement,) if settlement is not None else ()
        if state.dangling_calls():
            self.save("tool_result", ledger=ledger, settled=settled)
        else:
            self.finish_tools(ledger, settled)
        emitters.tool_ended(self, call, result)  # no-op without hooks

    def finish_tools(self, ledger: Sequence[LedgerEntry] = (), settled: Sequence[Settlement] = ()) -> None:
        state = self.state
        ordered = [state.results[call.idempotency_key] for call in state.pending_calls]
        state.messages.extend(self.agent.model.tool_result_messages(state.pending_calls, ordered))
        state.pending_calls = []
        state.results = {}
        state.resolutions = {}
        state.attempts = {}
        state.phase = "awaiting_model"
        self.save("tools_done", ledger=ledger, settled=settled)

    def handle_unknown(self, call: ToolCall, decision: Decision, settlement: Settlement | None) -> bool:
        """Apply the unknown-outcome policy (``settlement`` says how the outcome came to be
        unknown; the policy is added to it). Returns False when the run must stop here."""
        assert decision.entry is not None
        entry = decision.entry.replace(status="unknown", updated_at=clock.wall())
        policy = self.agent.unknown_policy
        settled = (settlement.replace(outcome="unknown", policy=policy),) if settlement is not None else ()
        self.reconciled.append((call.id, call.name, "unknown"))
        if policy == "tell_model":
            self.record_result(call, unknown_result(call, decision.reason), entry, *settled)
            return True
        state = self.state
        if policy == "pause":
            if state.phase == "paused":
                return False
            state.phase = "paused"
            state.error = f"call {call.id} ({call.name}) has an unknown outcome; settle it with `unbroken resolve`"
            self.save("paused", ledger=(entry,), settled=settled)
            return False
        # The run ends here, but its history must stay one a provider accepts: every tool_use
        # gets a tool_result (the unknown one says so; calls not yet reconciled say that).
        state.results[call.idempotency_key] = unknown_result(call, decision.reason)
        for other in state.dangling_calls():
            state.results[other.idempotency_key] = not_settled_result(other)
        ordered = [state.results[pending.idempotency_key] for pending in state.pending_calls]
        state.messages.extend(self.agent.model.tool_result_messages(state.pending_calls, ordered))
        state.pending_calls = []
        state.results = {}
        state.resolutions = {}
        state.attempts = {}
        state.phase = "failed"
        state.error = f"call {call.id} ({call.name}) has an unknown outcome ({decision.reason}); run failed by policy"
        self.save("failed", ledger=(entry,), settled=settled)
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


def _account(settled: Sequence[Settlement], resumed: Resumption | None) -> dict[str, JSONValue] | None:
    """A record's account keys (``codec.with_account``), None when it has nothing to say."""
    if not settled and resumed is None:
        return None
    return {
        "settled": [settlement.to_json() for settlement in settled],
        "resumed": resumed.to_json() if resumed is not None else None,
    }


def check_size(encoded: EncodedSave) -> None:
    """Refuse a save record that no load could read back (over the codec's record cap)."""
    body = encoded.body
    if len(body) * 4 <= MAX_RECORD_BYTES:  # a UTF-8 character is at most 4 bytes
        return
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8"))
    if size > MAX_RECORD_BYTES:
        raise RecordTooLarge(
            f"save point {encoded.seq} ({encoded.label}) of run {encoded.run_id!r} would be {size:,} bytes, over "
            f"the {MAX_RECORD_BYTES:,}-byte record cap that every load enforces; nothing was saved. Keep tool "
            "results and business_state smaller (Agent max_result_bytes cuts each result)"
        )


def over_call_cap(position: int, cap: int) -> str | None:
    """Why the call at ``position`` (0-based) of a turn is not run, when it is past ``cap``.
    The call is kept (saved at save A, answered with this as an ``is_error`` result): never
    dropped, so the history stays valid for the provider and the model learns what happened."""
    if position < cap:
        return None
    return (
        f"not run: this turn asked for more than {cap} tool calls and this agent runs at most {cap} per "
        "turn (Agent max_calls_per_turn); ask again in a later turn for what is still needed"
    )
