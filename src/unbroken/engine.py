"""The step machine: the one place that orders a run's steps.

``run_steps`` is a generator that owns the order of every turn::

    save A (the model's calls, pending) -> for each call in order: decide (ledger intent,
    probe) -> start it -> record each result as soon as it is back (with its ledger outcome
    and its change to business_state) -> save B with the last one -> unknown outcomes, last
    -> compact -> ask the model

It never waits on anything itself: it yields an *operation* (ask the model, compact, ask a
probe, start a tool, wait for a started tool, sleep out a takeover's grace) and a driver
performs it. ``drive_sync``
(``Agent.run``) starts a tool and waits for it before the next call is decided;
``drive_async`` (``Agent.arun``) lets the started tools of one turn run concurrently, and does
the machine's own store work in the store's threads, off the event loop. Both follow the same
order of durable steps, so they cannot diverge.

A resumed run first settles the calls left dangling by the crash. Each start of a call is
durable before the tool runs (a ledger intent; for a read-only call run again, a mark):
past ``Agent.max_attempts`` starts a call is settled without running it again (a tool that
kills its own process is not retried forever), and a kill before a start costs nothing.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from collections.abc import Generator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from . import clock, conversation, crashpoints, emitters
from ._plain import Frozen, Plain
from .codec import ensure_json
from .errors import ModelCallFailed, NotJSONValue, RunInterrupted
from .ledger import EffectLedger
from .model import ModelTurn, ToolSpec
from .state import JSONValue, LedgerEntry, Settlement, SettlementOutcome, ToolCall, ToolResult
from .tools import NotExecuted, Tool

if TYPE_CHECKING:
    from .reconcile import Decision
    from .session import RunResult, RunSession
    from .stores.base import Store


# ---------------------------------------------------------------------- operations


# (plain classes, not dataclasses: see _plain.py)


class CallModel(Frozen):
    """Ask the model for its next turn; the driver sends back a ``ModelTurn``."""

    __slots__ = ("context", "system", "tools")
    context: list[JSONValue]
    tools: list[ToolSpec]
    system: str | None

    def __init__(self, context: list[JSONValue], tools: list[ToolSpec], system: str | None) -> None:
        object.__setattr__(self, "context", context)
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "system", system)


class Compact(Frozen):
    """Run the agent's compaction; the driver sends back True when the state changed."""

    __slots__ = ()


class Probe(Frozen):
    """Ask ``tool``'s probe about ``call``; the driver sends back ``(answer, error)``."""

    __slots__ = ("call", "tool")
    tool: Tool
    call: ToolCall

    def __init__(self, tool: Tool, call: ToolCall) -> None:
        object.__setattr__(self, "tool", tool)
        object.__setattr__(self, "call", call)


class Start(Frozen):
    """Start ``job``; the driver sends back the jobs finished so far (sync: this one)."""

    __slots__ = ("job",)
    job: Job

    def __init__(self, job: Job) -> None:
        object.__setattr__(self, "job", job)


class Wait(Frozen):
    """Wait until at least one started job finishes; the driver sends back the finished ones."""

    __slots__ = ()


class Sleep(Frozen):
    """Wait ``seconds`` before the next step; the driver sends back None. The machine never
    sleeps itself: ``drive_sync`` waits on the clock seam (``clock.sleep``), ``drive_async``
    on the event loop (``asyncio.sleep``, holding no store thread), the simulator on its
    virtual clock. ``reason`` says what is waited for (for a reader, a log, a debugger)."""

    __slots__ = ("reason", "seconds")
    seconds: float
    reason: str

    def __init__(self, seconds: float, reason: str) -> None:
        object.__setattr__(self, "seconds", seconds)
        object.__setattr__(self, "reason", reason)


Operation = CallModel | Compact | Probe | Start | Wait | Sleep
Steps = Generator[Operation, Any, None]


class Job(Plain):
    """One call being executed. ``view`` is the business_state the tool sees: a private copy
    for a tool that takes ``state``, merged into the run's state when its result is recorded
    (so a half-made change is never saved by another call's save)."""

    __slots__ = ("base", "call", "decision", "done", "result", "resuming", "settlement", "tool", "view")
    call: ToolCall
    tool: Tool
    decision: Decision
    resuming: bool
    view: dict[str, JSONValue]
    base: dict[str, str]
    settlement: Settlement | None
    result: ToolResult | None
    done: bool

    def __init__(
        self,
        call: ToolCall,
        tool: Tool,
        decision: Decision,
        resuming: bool,
        view: dict[str, JSONValue],
        base: dict[str, str] | None = None,
        settlement: Settlement | None = None,
        result: ToolResult | None = None,
        done: bool = False,
    ) -> None:
        self.call = call
        self.tool = tool
        self.decision = decision
        self.resuming = resuming
        self.view = view
        self.base = {} if base is None else base
        self.settlement = settlement
        self.result = result
        self.done = done


# ---------------------------------------------------------------------- the order of a run


def run_steps(session: RunSession) -> Steps:
    """Drive an opened run to its end (or to a stop: pause, failure, ``max_turns``)."""
    agent = session.agent
    state = session.state
    if state.finished:
        return
    if session.resumed and state.phase in ("awaiting_model", "running_tools"):
        # One record per resume of a run that was running (a crash, or a stop on request): what
        # it found, counted. A run waiting for a person is not resumed until a person acts.
        session.record_resume()
    if not (yield from _settle(session, state.dangling_calls(), resuming=True)):
        return
    session.resume_seconds = session.since_start()
    while not state.finished:
        if state.turns >= conversation.turn_limit(session):  # the agent's max_turns, or this request's
            session.stop_for_max_turns()
            return
        if session.repair_dangling() and not (yield from _settle(session, state.dangling_calls(), resuming=True)):
            return
        if conversation.pending(session):  # follow-up messages queued while calls were in flight
            conversation.deliver(session)
        if agent.compaction is not None:
            try:
                changed = yield Compact()
            except Exception as exc:
                raise session.compaction_failed(exc) from exc
            if changed:
                session.save("compacted")
        crashpoints.hit("model.before_call")
        began = emitters.model_call_started(session)
        try:
            turn: ModelTurn = yield CallModel(list(agent.context(state)), agent.tool_specs, agent.system)
        except Exception as exc:
            emitters.model_call_ended(session, began, None, exc)
            raise ModelCallFailed(
                f"model call for run {session.run_id!r} failed ({type(exc).__name__}: {exc}); the run is "
                f"saved at save point {state.save_seq} and resumes from there"
            ) from exc
        session.record_turn(turn)
        emitters.model_call_ended(session, began, turn, None)
        if not (yield from _settle(session, state.dangling_calls(), resuming=False)):
            return


def _settle(session: RunSession, calls: list[ToolCall], *, resuming: bool) -> Generator[Operation, Any, bool]:
    """Settle ``calls`` in order; unknown outcomes last, so that a policy that stops the run
    never leaves a call it already claimed unexecuted. False when the run must stop here.
    Each call's settlement (what was found, asked, decided and why) is saved in the record that
    settles it (``account``)."""
    state = session.state
    if state.phase not in ("running_tools", "paused", "awaiting_approval"):
        return True
    # Imported here, not at the top: a resume that finds no call to settle (a crash while the
    # model was asked) never loads approvals, reconcile nor execution before its model request.
    from . import approvals
    from .execution import cut_result
    from .reconcile import after_probe, decide_first

    if not approvals.gate(session, calls):  # a call waits for a person: saved, nothing started
        return False
    capped = _count_attempts(session, calls) if resuming else {}
    unknown: list[tuple[ToolCall, Decision, Settlement | None]] = []
    running = 0
    for call in calls:
        tool = session.agent.tools.get(call.name)
        decision = capped.get(call.idempotency_key) or approvals.answer(session, call)
        if decision is None:
            decision = decide_first(call, tool, session.ledger, state.resolutions.get(call.idempotency_key))
        grace = 0.0
        if decision.action == "probe":
            in_doubt = decision.entry
            assert tool is not None and in_doubt is not None
            # Asked before the grace is over, "not executed" is what the probe read then: the holder
            # may act after that read, though the answer comes back once the grace is over.
            early = session.heartbeat.guard.absence_needs_wait(in_doubt) > 0
            answer, error = yield Probe(tool, call)
            if isinstance(answer, NotExecuted) and ((grace := (yield from _grace(session, call, in_doubt))) or early):
                # The previous holder might have acted while we waited for it to be unable to: ask again.
                answer, error = yield Probe(tool, call)
            if call.idempotency_key in capped and isinstance(answer, NotExecuted) and error is None:
                decision = _never_ran(call, decision)  # proven not to have happened; still not run again
            else:
                decision = after_probe(call, in_doubt, session.ledger, answer, error)
        if resuming:
            emitters.reconcile_decision(session, call, decision)
        settlement = account(session, call, tool, decision, resuming=resuming, grace=grace)
        if decision.action == "unknown":
            unknown.append((call, decision, settlement))
        elif decision.action == "answer":
            assert decision.result is not None
            if resuming:
                session.reconciled.append((call.id, call.name, decision.result.how))
            # A probe's Found value (or a reused ledger result) is cut like an executed result.
            result = cut_result(decision.result, session.agent.max_result_bytes)
            entry = decision.entry
            if entry is not None and entry.result is not None:
                entry = entry.replace(result=cut_result(entry.result, session.agent.max_result_bytes))
            session.record_result(call, result, entry, settlement)
        else:
            assert tool is not None
            emitters.tool_started(session, call, tool)
            job = _job(session, call, tool, decision, resuming, settlement)
            crashpoints.hit("tool.before_execute")
            _mark_started(session, job)  # a save: the step machine's, before the driver starts the tool
            finished = yield Start(job)
            running += 1
            for job in finished:
                running -= 1
                unknown += _record(session, job)
    while running:
        for job in (yield Wait()):
            running -= 1
            unknown += _record(session, job)
    for call, decision, settlement in unknown:
        if not session.handle_unknown(call, decision, settlement):
            return False
    if state.phase in ("running_tools", "paused") and not state.dangling_calls():
        session.finish_tools()  # every call was answered before (by hand, or by an older save)
    return True


def _grace(session: RunSession, call: ToolCall, in_doubt: LedgerEntry) -> Generator[Operation, Any, float]:
    """Wait (as ``Sleep`` operations) until whoever started ``in_doubt`` can no longer act, so
    that a "not executed" probe asked after it is evidence (``LeaseGuard.absence_needs_wait``,
    the rule). Asked again after each wait: the driver's wake-up is not trusted to be on time.
    Returns the seconds waited (0: trusted at once)."""
    waited = 0.0
    while (wait := session.heartbeat.guard.absence_needs_wait(in_doubt)) > 0:
        yield Sleep(wait, f"grace: the holder that started call {call.id!r} ({call.name}) may still act")
        waited += wait
    return waited


_HOW_OUTCOME: dict[str, SettlementOutcome] = {"reused": "reused", "probed": "probed", "resolved": "resolved"}


def account(
    session: RunSession, call: ToolCall, tool: Tool | None, decision: Decision, *, resuming: bool, grace: float = 0.0
) -> Settlement | None:
    """How ``call`` is being settled, as its record will say it (``Settlement``); None for the
    common case that needs no words: a call of a fresh turn started for the first time."""
    attempt = 0
    if decision.action == "execute":
        if decision.entry is not None:
            attempt = decision.entry.attempts
        elif resuming and tool is not None and tool.effect == "read_only":
            attempt = session.state.attempts.get(call.idempotency_key, 0) + 2  # the first run, the marks, this
        else:
            attempt = 1
        if not resuming and attempt == 1 and decision.ledger is None:
            return None
        outcome: SettlementOutcome = "ran"
    elif decision.action == "answer":
        assert decision.result is not None
        outcome = _HOW_OUTCOME.get(decision.result.how, "not_run")
    else:
        outcome = "unknown"  # "probe" is decided before this is asked
    reason = decision.reason
    if outcome == "not_run" and not reason and decision.result is not None:
        reason = decision.result.content[:300]
    return Settlement(
        call_id=call.id,
        tool=call.name,
        outcome=outcome,
        ledger=decision.ledger,
        probe=decision.probe,
        attempt=attempt,
        grace=round(grace, 3),
        resumed=resuming,
        reason=reason,
    )


def _count_attempts(session: RunSession, calls: list[ToolCall]) -> dict[str, Decision]:
    """Return the decisions for calls about to be settled after a crash that were already
    started ``max_attempts`` times. Only starts that really happened count: a side effect's or
    idempotent tool's ledger intents (each saved right before it runs), a read-only call's
    durable marks (``_mark_started``, saved right before it runs again after a crash) plus the
    first run; a kill before either mark costs nothing. A call that cannot bind to its tool
    is never started (``reconcile.unbindable``), so it is never counted."""
    state = session.state
    cap = session.agent.max_attempts
    capped: dict[str, Decision] = {}
    if state.phase != "running_tools":
        return capped  # paused or awaiting approval: a person settles it; nothing was running
    for call in calls:
        tool = session.agent.tools.get(call.name)
        if tool is None or call.error is not None:
            continue  # never executed here
        if tool.effect == "read_only":
            marks = state.attempts.get(call.idempotency_key, 0)
            if marks + 1 >= cap:  # the first run, and each durable re-start mark
                capped[call.idempotency_key] = _past_cap(session, call, tool, marks, None)
            continue
        entry = session.ledger.get(call.idempotency_key)
        if entry is not None and entry.status in ("pending", "unknown") and entry.attempts >= cap:
            capped[call.idempotency_key] = _past_cap(session, call, tool, entry.attempts, entry)
    return capped


def _past_cap(session: RunSession, call: ToolCall, tool: Tool, tried: int, entry: LedgerEntry | None) -> Decision:
    from .reconcile import Decision

    if tool.effect == "read_only":
        started = (
            f"it was started again after {tried} crash(es) and every attempt ended the process"
            if tried
            else "the process ended"
        )
    else:
        started = f"{tried} attempts to run it were recorded (each right before it started) and each ended the process"
    why = (
        f"{started} before its result was saved (os._exit, a crash, out of memory?); it is not run again "
        f"(Agent max_attempts={session.agent.max_attempts})"
    )
    found = entry.status if entry is not None else None
    if tool.effect == "side_effect" and entry is not None:
        # Its probe is still asked: a result it finds is the call's result, and "never ran" is
        # a known outcome (told to the model as not done), though the call is not run again.
        if tool.probe is None:
            return Decision("unknown", entry=entry, reason=why, ledger=found, probe="none")
        return Decision("probe", entry=entry, reason=why, ledger=found)
    result = ToolResult(
        call.id, f"NOT RUN AGAIN: the call to {call.name} (call id {call.id}): {why}.", True, "attempts_exhausted"
    )
    return Decision(
        "answer", result, EffectLedger.outcome(entry, result) if entry is not None else None, why, ledger=found
    )


def _never_ran(call: ToolCall, capped: Decision) -> Decision:
    """A call past the attempt cap whose probe says it never happened: answered as not done."""
    from .reconcile import Decision

    text = (
        f"NOT DONE: the call to {call.name} (call id {call.id}) never took effect (its probe says so), and it "
        f"is not run again: {capped.reason}. Call it again if it is still needed."
    )
    result = ToolResult(call.id, text, True, "attempts_exhausted")
    outcome = EffectLedger.outcome(capped.entry, result) if capped.entry else None
    return Decision("answer", result, outcome, capped.reason, ledger=capped.ledger, probe="not_executed")


def _mark_started(session: RunSession, job: Job) -> None:
    """A read-only call run again after a crash leaves no ledger intent: count its start in a
    durable mark first, so a tool that kills its process is not run forever."""
    if not job.resuming or job.tool.effect != "read_only":
        return
    attempts = session.state.attempts
    attempts[job.call.idempotency_key] = attempts.get(job.call.idempotency_key, 0) + 1
    with contextlib.suppress(RunInterrupted):  # a stop is honoured at the next save, after this call
        session.save("attempt")


def _job(
    session: RunSession, call: ToolCall, tool: Tool, decision: Decision, resuming: bool, settlement: Settlement | None
) -> Job:
    if not tool.takes_state:
        return Job(call, tool, decision, resuming, session.state.business_state, settlement=settlement)
    view = copy.deepcopy(session.state.business_state)
    base = {key: _text(value) for key, value in view.items()}
    return Job(call, tool, decision, resuming, view, base, settlement=settlement)


def _text(value: JSONValue) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _record(session: RunSession, job: Job) -> list[tuple[ToolCall, Decision, Settlement | None]]:
    """Make a finished job's result durable with its ledger outcome, its state change and its
    settlement; a timed-out side effect is returned as an unknown outcome instead."""
    from .execution import cut_result, timed_out_result
    from .reconcile import Decision

    call, tool, decision = job.call, job.tool, job.decision
    settlement = job.settlement
    in_doubt = _in_doubt(job)
    if in_doubt is not None:
        assert in_doubt.entry is not None
        ran = settlement or Settlement(call.id, call.name, "unknown", attempt=in_doubt.entry.attempts)
        return [(call, in_doubt, ran.replace(reason=in_doubt.reason))]
    if job.result is None:
        if tool.effect == "side_effect":
            assert decision.entry is not None
            why = f"it did not return within its timeout of {tool.timeout:g} s and may still act"
            unknown = Decision("unknown", entry=decision.entry, reason=why, ledger=decision.ledger)
            ran = settlement or Settlement(call.id, call.name, "unknown", attempt=decision.entry.attempts)
            return [(call, unknown, ran.replace(reason=why))]
        result = timed_out_result(tool, call)
    else:
        result = cut_result(job.result, session.agent.max_result_bytes)
        if tool.takes_state:
            refused = unsaveable_change(job.view, job.base)
            if refused is None:
                _merge(session.state.business_state, job.view, job.base)
            else:  # the tool's own mistake: this call fails, once; nothing of its change is kept
                result = _refused_change(call, result, refused)
    if job.resuming:
        session.reconciled.append((call.id, call.name, "re-run" if tool.effect != "side_effect" else "executed"))
    entry = EffectLedger.outcome(decision.entry, result) if decision.entry is not None else None
    session.record_result(call, result, entry, settlement)
    crashpoints.hit("tool.after_outcome")
    return []


def _in_doubt(job: Job) -> Decision | None:
    """A tool that may have acted but cannot tell (it raised ``OutcomeUnknown``: a connection
    broke mid-call) has an unknown outcome, settled by the run's ``unknown_policy``, when it
    is not read-only; a read-only one just failed."""
    from .reconcile import Decision

    result = job.result
    if result is None or result.how != "unknown":
        return None
    if job.tool.effect == "read_only" or job.decision.entry is None:
        job.result = result.replace(how="executed")
        return None
    return Decision("unknown", entry=job.decision.entry, reason=result.content, ledger=job.decision.ledger)


def unsaveable_change(view: dict[str, JSONValue], base: dict[str, str]) -> NotJSONValue | None:
    """The error a tool's change to its copy of business_state would raise at the save (a value
    that is not JSON), found before anything is merged; None when the change can be saved."""
    for key, value in view.items():
        if key not in base or base[key] != _text(value):
            try:
                ensure_json(value, f"business_state.{key}")
            except NotJSONValue as exc:
                return exc
    return None


def _merge(live: dict[str, JSONValue], view: dict[str, JSONValue], base: dict[str, str]) -> None:
    """Apply the keys a tool changed in its copy of business_state to the run's state."""
    for key, value in view.items():
        if key not in base or base[key] != _text(value):
            live[key] = value
    for key in base:
        if key not in view:
            live.pop(key, None)


def _refused_change(call: ToolCall, result: ToolResult, error: NotJSONValue) -> ToolResult:
    text = (
        f"Error: the call to {call.name} (call id {call.id}) returned, but its change to business_state "
        f"cannot be saved and was not kept: {error}. Its output was: {result.content}"
    )
    return ToolResult(call.id, text, True, result.how)


# ---------------------------------------------------------------------- the execute point


# The lease is re-validated (fenced) right before a tool that is not read-only runs, in the
# thread or task that runs it: ``acting`` raises LeaseLost instead of letting it act.


def execute_sync(session: RunSession, job: Job) -> Job:
    from .execution import invoke_sync

    with session.heartbeat.guard.acting(job.tool.effect):
        job.result = invoke_sync(job.tool, job.call, job.view)
    job.done = True
    crashpoints.hit("tool.after_execute")
    return job


async def execute_async(session: RunSession, job: Job, store: Store, began: Any = None) -> Job:
    """Run ``job``'s tool in this task; ``began`` (a future) is resolved once the lease check is
    done and the tool is entered (the driver goes on from there, as ``run`` would)."""
    from .execution import invoke_async
    from .stores.offload import off_loop

    guard = session.heartbeat.guard
    if job.tool.effect != "read_only":
        await off_loop(store, guard.check)  # the fence's store round trip, in a store thread
    with guard.acting(job.tool.effect, checked=True):
        if began is not None and not began.done():
            began.set_result(None)
        job.result = await invoke_async(job.tool, job.call, job.view)
    job.done = True
    crashpoints.hit("tool.after_execute")
    return job


# ---------------------------------------------------------------------- drivers


def drive_sync(session: RunSession) -> None:
    """Perform the steps one at a time in this thread (``Agent.run``)."""
    agent = session.agent
    steps = run_steps(session)
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            operation = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration:
            return
        reply, error = None, None
        try:
            if isinstance(operation, Start):
                reply = [execute_sync(session, operation.job)]
            elif isinstance(operation, CallModel):
                reply = agent.model.complete(operation.context, operation.tools, operation.system)
            elif isinstance(operation, Probe):
                from .reconcile import call_probe

                reply = call_probe(operation.tool, operation.call)
            elif isinstance(operation, Compact):
                assert agent.compaction is not None
                reply = agent.compaction.compact(session.state, agent.model)
            elif isinstance(operation, Sleep):
                clock.sleep(operation.seconds)
            else:
                reply = []  # Wait: a sync start has already finished
        except Exception as exc:
            error = exc


class _Opened(Frozen):
    """The first step of an async call: its run is opened (lease taken, state loaded)."""

    __slots__ = ("session",)
    session: RunSession

    def __init__(self, session: RunSession) -> None:
        object.__setattr__(self, "session", session)


def _held(hold: AbstractContextManager[RunSession]) -> Generator[Operation | _Opened, Any, RunResult]:
    """One ``arun``/``aresume``/``asend`` call as one generator: open the run (``hold``), its
    steps, its result, then close it (release the lease) on the way out, however it ends."""
    with hold as session:
        yield _Opened(session)
        yield from run_steps(session)
        return session.result(session.resume_seconds or session.since_start())


def _advance(steps: Generator[Any, Any, Any], reply: Any, error: BaseException | None) -> tuple[str, Any]:
    """The step machine's work up to its next operation, in a store thread: never raises."""
    try:
        return "yielded", (steps.send(reply) if error is None else steps.throw(error))
    except StopIteration as stop:
        return "returned", stop.value
    except BaseException as exc:  # handed back to the loop, raised there
        return "raised", exc


def _unwind(steps: Generator[Any, Any, Any], exc: BaseException) -> None:
    """End the steps with ``exc`` (a cancellation): their cleanup runs (the lease is released)."""
    try:
        steps.throw(exc)
    except BaseException:  # ``exc`` came back out (or cleanup's own error): the caller raises ``exc``
        return
    steps.close()  # (they never catch a cancellation; if they did, they end here)


async def drive_async(hold: AbstractContextManager[RunSession], store: Store) -> RunResult:
    """Perform the steps of one call on the running event loop (``Agent.arun``, ``aresume``,
    ``asend``): the tools started in one turn run concurrently; each result is recorded as soon
    as it is back. The step machine's own work between two operations (opening the run, every
    save, load and ledger claim, the lease's take and release) runs in ``store``'s threads
    (``stores.offload``), one step at a time and in this call's context, so the loop never waits
    on the store and the store's rules stay written once. A cancellation (``task.cancel()``,
    Ctrl-C under ``asyncio.run``) waits for a step already running, so a save is made or not,
    never in flight; the steps then unwind (the lease is released) and it is raised."""
    import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`
    import contextvars

    from .stores.offload import executor, settle

    context = contextvars.copy_context()  # one context for every step: the run's, as in run()
    steps = _held(hold)
    # A tool left running when this ends (cancelled, an error) keeps the lease from being
    # released while it may act: its ``acting`` scope (or its thread) is counted by the guard.
    running: set[asyncio.Task[Job]] = set()
    session: RunSession | None = None
    reply: Any = None
    error: BaseException | None = None
    while True:
        step, cancelled = await settle(store, functools.partial(context.run, _advance, steps, reply, error))
        if cancelled:
            if session is None and step.cancelled():
                steps.close()  # cancelled before the run was even opened: nothing to undo
            else:
                await settle(store, functools.partial(context.run, _unwind, steps, asyncio.CancelledError()))
            raise asyncio.CancelledError
        kind, value = step.result()
        if kind == "returned":
            return value  # type: ignore[no-any-return]
        if kind == "raised":
            raise value
        operation = value
        reply, error = None, None
        try:
            if isinstance(operation, _Opened):
                session = operation.session
                session.heartbeat.guard.release_in = executor(store).submit  # after a tool that outlived us
            elif isinstance(operation, Start):
                assert session is not None
                loop = asyncio.get_running_loop()
                began = loop.create_future()
                job = execute_async(session, operation.job, store, began)
                task = loop.create_task(job, context=context.copy())
                task.add_done_callback(_resolving(began))
                running.add(task)
                await began  # its lease check made and the tool entered (or it failed): then go on
                reply = _collect(running, [task for task in running if task.done()])
            elif isinstance(operation, Wait):
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                reply = _collect(running, list(finished))
            elif isinstance(operation, CallModel):
                assert session is not None
                model = session.agent.model
                reply = await model.acomplete(operation.context, operation.tools, operation.system)
            elif isinstance(operation, Probe):
                from .reconcile import acall_probe

                reply = await acall_probe(operation.tool, operation.call)
            elif isinstance(operation, Sleep):
                await asyncio.sleep(operation.seconds)  # on the loop: no store thread is held
            else:
                assert session is not None and session.agent.compaction is not None
                reply = await session.agent.compaction.acompact(session.state, session.agent.model)
        except Exception as exc:
            error = exc
        except BaseException as exc:  # cancelled (or Ctrl-C) while awaiting: unwind the steps, then raise
            await settle(store, functools.partial(context.run, _unwind, steps, exc))
            raise


def _resolving(began: Any) -> Any:
    """A done callback that resolves ``began`` if the task ended before its tool was entered."""

    def resolve(_task: Any) -> None:
        if not began.done():
            began.set_result(None)

    return resolve


def _collect(running: set[Any], finished: list[Any]) -> list[Job]:
    for task in finished:
        running.discard(task)
    return [task.result() for task in finished]
