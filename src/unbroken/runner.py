"""The agent loop: load or start, ask the model, save A, run tools, save B, repeat.

No SQL and no SDK here: the store persists, the model speaks its provider's format, and
``reconcile.decide`` says what each tool call may do. ``Agent.run`` and ``Agent.arun`` share
every durable step (``_Session``); they differ only in how the model and tools are awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from . import crashpoints
from .codec import MIGRATIONS, Encoder, encode_full, ensure_json
from .compaction import Compactor
from .errors import (
    ConfigError,
    IncompatibleSchema,
    ModelCallFailed,
    RunInterrupted,
    RunNotFound,
    TaskMismatch,
)
from .leases import Heartbeat, acquire, make_owner
from .ledger import EffectLedger, not_settled_result, unknown_result
from .model import Model, ModelTurn, ProposedCall, add_usage
from .reconcile import Decision, decide, to_content
from .state import JSONValue, Lease, LedgerEntry, RunState, ToolCall, ToolResult, check_run_id, idempotency_key
from .stores.base import Store
from .tools import Tool, as_tool

log = logging.getLogger("unbroken")

UnknownPolicy = Literal["tell_model", "pause", "fail"]
UNKNOWN_POLICIES: tuple[str, ...] = ("tell_model", "pause", "fail")
BusinessStateMigration = Callable[[dict[str, JSONValue]], dict[str, JSONValue]]
ContextBuilder = Callable[[RunState], Sequence[JSONValue]]


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


class _Session:
    """One process's hold on one run: its state, lease, encoder and ledger."""

    def __init__(self, agent: Agent, run_id: str, lease: Lease, heartbeat: Heartbeat) -> None:
        self.agent = agent
        self.store = agent.store
        self.run_id = run_id
        self.heartbeat = heartbeat
        self.lease = lease
        self.encoder = Encoder(agent.snapshot_every)
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
        self._migrate_business_state()
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

    def _migrate_business_state(self) -> None:
        state = self.state
        wanted = self.agent.business_state_version
        if state.business_state_version > wanted:
            raise IncompatibleSchema(
                f"run {self.run_id!r} has business_state version {state.business_state_version}, newer than "
                f"this agent's {wanted}; run it with the newer code"
            )
        while state.business_state_version < wanted:
            step = self.agent.business_state_migrations.get(state.business_state_version)
            if step is None:
                raise IncompatibleSchema(
                    f"run {self.run_id!r} has business_state version {state.business_state_version} and no "
                    f"migration to {state.business_state_version + 1} was given to the Agent"
                )
            state.business_state = step(dict(state.business_state))
            state.business_state_version += 1

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


def _invoke_sync(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult:
    try:
        value = tool.fn(**tool.arguments(call, business_state))
        if inspect.isawaitable(value):
            value = asyncio.run(_await(value))
        return ToolResult(call.id, to_content(value))
    except Exception as exc:
        return ToolResult(call.id, f"{type(exc).__name__}: {exc}", is_error=True)


async def _await(value: Any) -> Any:
    return await value


async def _invoke_async(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult:
    try:
        if tool.is_async:
            value = await tool.fn(**tool.arguments(call, business_state))
        else:
            value = await asyncio.to_thread(tool.fn, **tool.arguments(call, business_state))
        return ToolResult(call.id, to_content(value))
    except Exception as exc:
        return ToolResult(call.id, f"{type(exc).__name__}: {exc}", is_error=True)


class Agent:
    """A resumable agent: a model, its tools and a store.

    ``run(task, run_id=...)`` starts the run, or resumes it from its last save point if the
    store already holds it. Every save point is durable before the next step starts."""

    def __init__(
        self,
        model: Model,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        store: Store | None = None,
        *,
        max_turns: int = 40,
        system: str | None = None,
        unknown_policy: UnknownPolicy = "tell_model",
        snapshot_every: int = 50,
        lease_ttl: float = 30.0,
        business_state_version: int = 1,
        business_state_migrations: Mapping[int, BusinessStateMigration] | None = None,
        context: ContextBuilder | None = None,
        compaction: Compactor | None = None,
    ) -> None:
        if unknown_policy not in UNKNOWN_POLICIES:
            raise ConfigError(f"unknown_policy must be one of {', '.join(UNKNOWN_POLICIES)}, not {unknown_policy!r}")
        if max_turns < 1:
            raise ConfigError("max_turns must be at least 1")
        if lease_ttl <= 0:
            raise ConfigError("lease_ttl must be positive")
        if store is None:
            from .stores import open_store

            store = open_store()
        self.model = model
        self.tools: dict[str, Tool] = {}
        for item in tools:
            tool = as_tool(item)
            if tool.name in self.tools:
                raise ConfigError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        self.store = store
        self.max_turns = max_turns
        self.system = system
        self.unknown_policy: UnknownPolicy = unknown_policy
        self.snapshot_every = snapshot_every
        self.lease_ttl = lease_ttl
        self.business_state_version = business_state_version
        self.business_state_migrations = dict(business_state_migrations or {})
        self.compaction = compaction
        if context is None and compaction is not None:
            context = lambda state: compaction.context(state, model)  # noqa: E731
        self.context: ContextBuilder = context or (lambda state: state.messages)
        self.owner = make_owner()
        self.migrations = MIGRATIONS
        self.stop_requested = threading.Event()
        """Set it from any thread (a worker does on SIGTERM) to make a run stop right after its
        next save point, raising ``RunInterrupted``; its lease is released and it resumes later."""

    @property
    def tool_specs(self) -> list[Any]:
        return [tool.spec for tool in self.tools.values()]

    # ------------------------------------------------------------------ sync

    def run(
        self,
        task: str | None = None,
        *,
        run_id: str | None = None,
        business_state: Mapping[str, JSONValue] | None = None,
    ) -> RunResult:
        """Start or resume a run and drive it until it completes, hits ``max_turns``, pauses or
        fails. A finished run returns its stored result without calling the model."""
        run_id = check_run_id(run_id) if run_id is not None else f"run-{uuid.uuid4().hex[:12]}"
        if task is None and not self.store.exists(run_id):
            raise RunNotFound(f"no run {run_id!r} to resume in {self.store.url}; give a task to start it")
        started = time.perf_counter()
        lease = acquire(self.store, run_id, self.owner, self.lease_ttl)
        try:
            with Heartbeat(self.store, lease, self.lease_ttl) as heartbeat:
                session = _Session(self, run_id, lease, heartbeat)
                session.open(task, business_state)
                if session.state.finished:
                    return session.result(None)
                if not self._reconcile_sync(session):
                    return session.result(time.perf_counter() - started if session.resumed else None)
                resume_seconds = time.perf_counter() - started if session.resumed else None
                self._loop_sync(session)
                return session.result(resume_seconds)
        finally:
            self.store.release_lease(lease)

    def _reconcile_sync(self, session: _Session) -> bool:
        state = session.state
        if state.phase not in ("running_tools", "paused"):
            return True
        for call in state.dangling_calls():
            if not self._settle_sync(session, call, resuming=True):
                return False
        if state.phase in ("running_tools", "paused"):
            session.finish_tools()
        return True

    def _settle_sync(self, session: _Session, call: ToolCall, *, resuming: bool) -> bool:
        decision = decide(call, self.tools.get(call.name), session.ledger, session.state.resolutions.get(call.id))
        if decision.action == "unknown":
            return session.handle_unknown(call, decision)
        if decision.action == "answer":
            assert decision.result is not None
            if resuming:
                session.reconciled.append((call.id, call.name, decision.result.how))
            session.record_result(call, decision.result, decision.entry)
            return True
        tool = self.tools[call.name]
        crashpoints.hit("tool.before_execute")
        result = _invoke_sync(tool, call, session.state.business_state)
        crashpoints.hit("tool.after_execute")
        if resuming:
            session.reconciled.append((call.id, call.name, "re-run" if tool.effect != "side_effect" else "executed"))
        entry = EffectLedger.outcome(decision.entry, result) if decision.entry is not None else None
        session.record_result(call, result, entry)
        crashpoints.hit("tool.after_outcome")
        return True

    def _loop_sync(self, session: _Session) -> None:
        state = session.state
        while not state.finished:
            if state.turns >= self.max_turns:
                session.stop_for_max_turns()
                return
            if session.repair_dangling() and not self._reconcile_sync(session):
                return
            session.compact()
            crashpoints.hit("model.before_call")
            try:
                turn = self.model.complete(self.context(state), self.tool_specs, self.system)
            except Exception as exc:
                raise ModelCallFailed(
                    f"model call for run {session.run_id!r} failed ({type(exc).__name__}: {exc}); the run is "
                    f"saved at save point {state.save_seq} and resumes from there"
                ) from exc
            session.record_turn(turn)
            for call in list(state.pending_calls):
                if not self._settle_sync(session, call, resuming=False):
                    return

    # ------------------------------------------------------------------ async

    async def arun(
        self,
        task: str | None = None,
        *,
        run_id: str | None = None,
        business_state: Mapping[str, JSONValue] | None = None,
    ) -> RunResult:
        """Async twin of ``run``: awaits an async model, and runs the calls of one turn concurrently
        (sync tools in threads). Each result is durable as soon as it is recorded."""
        run_id = check_run_id(run_id) if run_id is not None else f"run-{uuid.uuid4().hex[:12]}"
        if task is None and not self.store.exists(run_id):
            raise RunNotFound(f"no run {run_id!r} to resume in {self.store.url}; give a task to start it")
        started = time.perf_counter()
        lease = acquire(self.store, run_id, self.owner, self.lease_ttl)
        try:
            with Heartbeat(self.store, lease, self.lease_ttl) as heartbeat:
                session = _Session(self, run_id, lease, heartbeat)
                session.open(task, business_state)
                if session.state.finished:
                    return session.result(None)
                if not await self._settle_all_async(session, session.state.dangling_calls(), resuming=True):
                    return session.result(time.perf_counter() - started if session.resumed else None)
                if session.state.phase in ("running_tools", "paused"):
                    session.finish_tools()
                resume_seconds = time.perf_counter() - started if session.resumed else None
                await self._loop_async(session)
                return session.result(resume_seconds)
        finally:
            self.store.release_lease(lease)

    async def _settle_all_async(self, session: _Session, calls: Sequence[ToolCall], *, resuming: bool) -> bool:
        if session.state.phase not in ("running_tools", "paused"):
            return True
        # Decide sequentially (ledger writes are quick), then run the executable calls concurrently.
        # Unknown outcomes are handled last: a policy that stops the run must not leave a call
        # that was already claimed (intent saved) unexecuted, or it would look in doubt later.
        runnable: list[tuple[ToolCall, Decision]] = []
        unknown: list[tuple[ToolCall, Decision]] = []
        for call in calls:
            decision = decide(call, self.tools.get(call.name), session.ledger, session.state.resolutions.get(call.id))
            if decision.action == "unknown":
                unknown.append((call, decision))
            elif decision.action == "answer":
                assert decision.result is not None
                if resuming:
                    session.reconciled.append((call.id, call.name, decision.result.how))
                session.record_result(call, decision.result, decision.entry)
            else:
                runnable.append((call, decision))

        async def execute(call: ToolCall, decision: Decision) -> None:
            tool = self.tools[call.name]
            crashpoints.hit("tool.before_execute")
            result = await _invoke_async(tool, call, session.state.business_state)
            crashpoints.hit("tool.after_execute")
            if resuming:
                session.reconciled.append(
                    (call.id, call.name, "re-run" if tool.effect != "side_effect" else "executed")
                )
            entry = EffectLedger.outcome(decision.entry, result) if decision.entry is not None else None
            session.record_result(call, result, entry)
            crashpoints.hit("tool.after_outcome")

        await asyncio.gather(*(execute(call, decision) for call, decision in runnable))
        # Stops at the first unknown whose policy ends this session (pause, fail).
        return all(session.handle_unknown(call, decision) for call, decision in unknown)

    async def _loop_async(self, session: _Session) -> None:
        state = session.state
        while not state.finished:
            if state.turns >= self.max_turns:
                session.stop_for_max_turns()
                return
            if session.repair_dangling():
                if not await self._settle_all_async(session, state.dangling_calls(), resuming=True):
                    return
                if state.phase in ("running_tools", "paused"):
                    session.finish_tools()
            await session.acompact()
            crashpoints.hit("model.before_call")
            try:
                turn = await self.model.acomplete(self.context(state), self.tool_specs, self.system)
            except Exception as exc:
                raise ModelCallFailed(
                    f"model call for run {session.run_id!r} failed ({type(exc).__name__}: {exc}); the run is "
                    f"saved at save point {state.save_seq} and resumes from there"
                ) from exc
            session.record_turn(turn)
            if not await self._settle_all_async(session, list(state.pending_calls), resuming=False):
                return


def resolve_call(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    result: str | None = None,
    not_executed: bool = False,
    is_error: bool = False,
) -> RunState:
    """Settle a call whose outcome is unknown, as a person who checked it: either it took
    effect (``result`` is what the model will be told) or it did not (``not_executed``: it
    will run when the run resumes). Durable when it returns; refuses if the run is live."""
    if (result is None) == (not not_executed):
        raise ConfigError("give exactly one of result=... or not_executed=True")
    check_run_id(run_id)
    owner = make_owner()
    lease = acquire(store, run_id, owner, 30.0)
    try:
        decoded = store.decode(run_id)
        state = decoded.state
        call = next((c for c in state.pending_calls if c.id == call_id), None)
        if call is None or call_id in state.results:
            open_ids = ", ".join(c.id for c in state.dangling_calls()) or "none"
            raise ConfigError(f"run {run_id!r} has no unsettled call {call_id!r}; unsettled calls: {open_ids}")
        encoder = Encoder()
        encoder.prime(state)
        ledger_entries: tuple[LedgerEntry, ...] = ()
        entry = store.ledger_get(run_id, call.idempotency_key)
        if result is not None:
            settled = ToolResult(call.id, result, is_error, "resolved")
            state.results[call.id] = settled
            if entry is not None:
                ledger_entries = (EffectLedger.outcome(entry, settled),)
        else:
            state.resolutions[call.id] = "not_executed"
        if state.phase == "paused":
            state.phase = "running_tools"
            state.error = None
        state.save_seq += 1
        state.updated_at = time.time()
        encoded = encoder.encode(state, "resolved", ledger=ledger_entries)
        store.append(encoded, expect_seq=state.save_seq - 1, fence=lease.fence)
        return state
    finally:
        store.release_lease(lease)
