"""The agent loop: load or start, ask the model, save A, run tools, save B, repeat.

No SQL and no SDK here: the store persists, the model speaks its provider's format, and
``reconcile.decide`` says what each tool call may do. ``Agent.run`` and ``Agent.arun`` share
every durable step (``RunSession``); they differ only in how the model and tools are awaited.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from . import crashpoints
from .codec import MIGRATIONS
from .compaction import Compactor
from .errors import ConfigError, ModelCallFailed, RunNotFound
from .execution import invoke_async, invoke_sync
from .leases import Heartbeat, acquire, make_owner
from .ledger import EffectLedger
from .model import Model
from .reconcile import Decision, decide
from .session import RunResult, RunSession
from .state import JSONValue, RunState, ToolCall, check_run_id
from .stores.base import Store
from .tools import Tool, as_tool

UnknownPolicy = Literal["tell_model", "pause", "fail"]
UNKNOWN_POLICIES: tuple[str, ...] = ("tell_model", "pause", "fail")
BusinessStateMigration = Callable[[dict[str, JSONValue]], dict[str, JSONValue]]
ContextBuilder = Callable[[RunState], Sequence[JSONValue]]


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
        started = time.perf_counter()
        with self._hold(task, run_id, business_state) as session:
            if session.state.finished:
                return session.result(None)
            if not self._reconcile_sync(session):
                return session.result(_since(started, session))
            resume_seconds = _since(started, session)
            self._loop_sync(session)
            return session.result(resume_seconds)

    @contextmanager
    def _hold(
        self, task: str | None, run_id: str | None, business_state: Mapping[str, JSONValue] | None
    ) -> Iterator[RunSession]:
        """Take the run's lease (heartbeat running), open or start the run; release on exit."""
        run_id = check_run_id(run_id) if run_id is not None else f"run-{uuid.uuid4().hex[:12]}"
        if task is None and not self.store.exists(run_id):
            raise RunNotFound(f"no run {run_id!r} to resume in {self.store.url}; give a task to start it")
        lease = acquire(self.store, run_id, self.owner, self.lease_ttl)
        try:
            with Heartbeat(self.store, lease, self.lease_ttl) as heartbeat:
                session = RunSession(self, run_id, lease, heartbeat)
                session.open(task, business_state)
                yield session
        finally:
            self.store.release_lease(lease)

    def _reconcile_sync(self, session: RunSession) -> bool:
        state = session.state
        if state.phase not in ("running_tools", "paused"):
            return True
        for call in state.dangling_calls():
            if not self._settle_sync(session, call, resuming=True):
                return False
        if state.phase in ("running_tools", "paused"):
            session.finish_tools()
        return True

    def _settle_sync(self, session: RunSession, call: ToolCall, *, resuming: bool) -> bool:
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
        result = invoke_sync(tool, call, session.state.business_state)
        crashpoints.hit("tool.after_execute")
        if resuming:
            session.reconciled.append((call.id, call.name, "re-run" if tool.effect != "side_effect" else "executed"))
        entry = EffectLedger.outcome(decision.entry, result) if decision.entry is not None else None
        session.record_result(call, result, entry)
        crashpoints.hit("tool.after_outcome")
        return True

    def _loop_sync(self, session: RunSession) -> None:
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
        started = time.perf_counter()
        with self._hold(task, run_id, business_state) as session:
            if session.state.finished:
                return session.result(None)
            if not await self._settle_all_async(session, session.state.dangling_calls(), resuming=True):
                return session.result(_since(started, session))
            if session.state.phase in ("running_tools", "paused"):
                session.finish_tools()
            resume_seconds = _since(started, session)
            await self._loop_async(session)
            return session.result(resume_seconds)

    async def _settle_all_async(self, session: RunSession, calls: Sequence[ToolCall], *, resuming: bool) -> bool:
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
            result = await invoke_async(tool, call, session.state.business_state)
            crashpoints.hit("tool.after_execute")
            if resuming:
                session.reconciled.append(
                    (call.id, call.name, "re-run" if tool.effect != "side_effect" else "executed")
                )
            entry = EffectLedger.outcome(decision.entry, result) if decision.entry is not None else None
            session.record_result(call, result, entry)
            crashpoints.hit("tool.after_outcome")

        import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

        await asyncio.gather(*(execute(call, decision) for call, decision in runnable))
        # Stops at the first unknown whose policy ends this session (pause, fail).
        return all(session.handle_unknown(call, decision) for call, decision in unknown)

    async def _loop_async(self, session: RunSession) -> None:
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


def _since(started: float, session: RunSession) -> float | None:
    """Seconds from the call to now, for a resumed run (how long load + reconcile took)."""
    return time.perf_counter() - started if session.resumed else None
