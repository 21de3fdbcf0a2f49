"""``Agent``: an immutable description of an agent (model, tools, policies), and the two
drivers of its step machine, ``run`` and ``arun``.

No SQL and no SDK here: the store persists, the model speaks its provider's format, the
engine (``engine.py``) owns the order of every step, and ``reconcile`` says what each tool
call may do. Per-run things (the store, the lease owner, the stop signal) are arguments of
``run``/``arun``; the agent's own ``store`` is the default store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from . import conversation, emitters, owners
from . import resources as run_resources
from .acceptance import MAX_COUNT
from .codec import MIGRATIONS
from .compaction import Compactor
from .conversation import TurnsPer
from .engine import drive_async, drive_sync
from .errors import ConfigError, LeaseLost, RunNotFound
from .leases import Heartbeat, make_owner, take_lease
from .missing import missing_run
from .model import Model
from .resources import Opener
from .session import RunResult, RunSession
from .state import JSONValue, RunState, check_run_id, check_task, new_run_id
from .stores.base import Store
from .tools import Tool, as_tool

UnknownPolicy = Literal["tell_model", "pause", "fail"]
UNKNOWN_POLICIES: tuple[str, ...] = ("tell_model", "pause", "fail")
BusinessStateMigration = Callable[[dict[str, JSONValue]], dict[str, JSONValue]]
ContextBuilder = Callable[[RunState], Sequence[JSONValue]]

DEFAULT_MAX_RESULT_BYTES = 4 * 1024 * 1024
"""A tool result longer than this (UTF-8) is cut to its head with a note (Agent max_result_bytes)."""

DEFAULT_MAX_CALLS_PER_TURN = 128
"""Tool calls of one model turn that run; the rest are answered with an error (Agent max_calls_per_turn)."""

if TYPE_CHECKING:
    from .hooks import Hook


class Agent:
    """A resumable agent: a model, its tools, its policies, and a default store.

    ``run(task, run_id=...)`` starts the run, or resumes it from its last save point if the
    store already holds it; ``resume(run_id)`` only resumes (``RunNotFound`` if the store has
    no such run, never a fresh start). Every save point is durable before the next step starts.

    An ``Agent`` is immutable once built (``agent.x = ...`` raises): derive a changed one with
    ``agent.replace(store=..., model=..., tools=...)``, and pass per-run things to ``run``."""

    _frozen = False

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
        lease_grace: float | None = None,
        business_state_version: int = 1,
        business_state_migrations: Mapping[int, BusinessStateMigration] | None = None,
        context: ContextBuilder | None = None,
        compaction: Compactor | None = None,
        max_attempts: int = 3,
        max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES,
        max_calls_per_turn: int = DEFAULT_MAX_CALLS_PER_TURN,
        hooks: Iterable[Hook] = (),
        resources: Mapping[str, Opener] | None = None,
    ) -> None:
        if unknown_policy not in UNKNOWN_POLICIES:
            raise ConfigError(f"unknown_policy must be one of {', '.join(UNKNOWN_POLICIES)}, not {unknown_policy!r}")
        if max_turns < 1:
            raise ConfigError("max_turns must be at least 1")
        if lease_ttl <= 0:
            raise ConfigError("lease_ttl must be positive")
        if lease_grace is not None and lease_grace < 0:
            raise ConfigError("lease_grace must be zero or more seconds (or None: lease_ttl)")
        if max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")
        if max_result_bytes is not None and max_result_bytes < 1024:
            raise ConfigError("max_result_bytes must be at least 1024 (or None for no cut)")
        if type(max_calls_per_turn) is not int or max_calls_per_turn < 1:
            raise ConfigError(f"max_calls_per_turn must be a whole number >= 1, not {max_calls_per_turn!r}")
        if type(business_state_version) is not int or not 0 <= business_state_version <= MAX_COUNT:
            shown = (
                f"an integer of {business_state_version.bit_length()} bits"
                if type(business_state_version) is int and business_state_version >= 2**64
                else repr(business_state_version)
            )
            raise ConfigError(
                "business_state_version must be a whole number from 0 to 2**53-1 (every saved run carries it "
                f"and no load accepts another), not {shown}"
            )
        if store is None:
            from .stores import open_store

            store = open_store()
        by_name: dict[str, Tool] = {}
        for item in tools:
            tool = as_tool(item)
            if tool.name in by_name:
                raise ConfigError(f"two tools are named {tool.name!r}")
            by_name[tool.name] = tool
        self._given: dict[str, Any] = {
            "model": model,
            "tools": list(by_name.values()),
            "store": store,
            "max_turns": max_turns,
            "system": system,
            "unknown_policy": unknown_policy,
            "snapshot_every": snapshot_every,
            "lease_ttl": lease_ttl,
            "lease_grace": lease_grace,
            "business_state_version": business_state_version,
            "business_state_migrations": business_state_migrations,
            "context": context,
            "compaction": compaction,
            "max_attempts": max_attempts,
            "max_result_bytes": max_result_bytes,
            "max_calls_per_turn": max_calls_per_turn,
            "hooks": tuple(hooks),
            "resources": resources,
        }
        self.model = model
        self.tools: Mapping[str, Tool] = MappingProxyType(by_name)
        self.store = store
        self.max_turns = max_turns
        self.system = system
        self.unknown_policy: UnknownPolicy = unknown_policy
        self.snapshot_every = snapshot_every
        self.lease_ttl = lease_ttl
        self.lease_grace = lease_grace
        """After taking over a run from a holder that is not provably dead, how long past its
        lease expiry a "not executed" probe is distrusted (None: ``lease_ttl``; docs/effects.md)."""
        self.business_state_version = business_state_version
        self.business_state_migrations: Mapping[int, BusinessStateMigration] = MappingProxyType(
            dict(business_state_migrations or {})
        )
        self.compaction = compaction
        if context is None and compaction is not None:
            context = lambda state: compaction.context(state, model)  # noqa: E731
        self.context: ContextBuilder = context or (lambda state: state.messages)
        self.max_attempts = max_attempts
        """How many times one call may be started before a resume settles it without running it
        (a tool that kills its own process is not run forever)."""
        self.max_result_bytes = max_result_bytes
        """A tool result over this many UTF-8 bytes keeps its head and a note saying it was cut."""
        self.max_calls_per_turn = max_calls_per_turn
        """Calls of one model turn past this many are saved with the turn and answered with an
        ``is_error`` result without running (a hostile page cannot make one turn run 10,000 calls)."""
        self.hooks: tuple[Hook, ...] = self._given["hooks"]
        """Callables given every event of a run (``unbroken.hooks``); a hook that raises is logged."""
        self.resources: Mapping[str, Opener] = MappingProxyType(dict(resources or {}))
        """Openers by descriptor kind: ``resource(name)`` reopens business_state[name] (``unbroken.resources``)."""
        self._owner = owners.ProcessOwner()
        self.migrations = MIGRATIONS
        self.stop_requested = threading.Event()
        """The default stop signal: set it from any thread to make a run stop right after its next
        save point, raising ``RunInterrupted`` (``run(stop=...)`` passes one per run instead)."""
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise AttributeError(
                f"Agent is immutable: use agent.replace({name}=...) for a changed copy, or pass per-run "
                "things (store, owner, stop) to run()/arun()"
            )
        object.__setattr__(self, name, value)

    @property
    def owner(self) -> str:
        """This agent's own lease owner name in this process, under which a ``Worker`` claims
        runs (and then passes it: ``run(owner=agent.owner)`` re-enters that claim). It names
        the process that reads it: a child forked after the agent was built gets a name of its
        own (``owners.ProcessOwner``). A ``run``/``arun`` call without ``owner`` takes the lease
        under a name of its own, so two callers in one process on one run are refused like two
        processes (``LeaseHeld``), never handed the same live lease."""
        return self._owner.name

    def replace(self, **changes: Any) -> Agent:
        """A new Agent like this one with ``changes`` (any constructor argument)."""
        unknown = sorted(set(changes) - set(self._given))
        if unknown:
            raise ConfigError(f"Agent has no option {unknown[0]!r}")
        return Agent(**{**self._given, **changes})

    @property
    def tool_specs(self) -> list[Any]:
        return [tool.spec for tool in self.tools.values()]

    def run(
        self,
        task: str | None = None,
        *,
        run_id: str | None = None,
        business_state: Mapping[str, JSONValue] | None = None,
        store: Store | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Start or resume a run and drive it until it completes, hits ``max_turns``, pauses or
        fails. A finished run returns its stored result without calling the model. ``store`` and
        ``stop`` default to the agent's own; ``owner`` (the lease owner name) to a new one per call."""
        with self._hold(task, run_id, business_state, store, owner, stop) as session:
            drive_sync(session)
            return session.result(session.resume_seconds or session.since_start())

    async def arun(
        self,
        task: str | None = None,
        *,
        run_id: str | None = None,
        business_state: Mapping[str, JSONValue] | None = None,
        store: Store | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Async twin of ``run``, with the same steps in the same order: awaits an async model,
        and lets the calls of one turn run concurrently (sync tools in threads). Each result is
        durable as soon as it is recorded. The store's work runs in the store's own threads, never
        on the event loop (``stores.offload``); a cancelled call leaves every save made or not."""
        target = store if store is not None else self.store
        return await drive_async(self._hold(task, run_id, business_state, store, owner, stop), target)

    def resume(
        self,
        run_id: str,
        *,
        store: Store | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Resume the stored run ``run_id`` from its last save point and drive it like ``run``;
        never starts a run. Raises ``RunNotFound`` when the store holds no such run (``RunQueued``
        is one: submitted, never started), including a run it held and lost (a server restarted
        empty, evicted keys): where ``run(task, run_id=...)`` would start that run over and repeat
        its side effects, this refuses. ``CorruptCheckpoint`` when only part of it is left."""
        with _never_started(run_id, store or self.store):
            return self.run(None, run_id=run_id, store=store, owner=owner, stop=stop)

    async def aresume(
        self,
        run_id: str,
        *,
        store: Store | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Async twin of ``resume`` (drives the run like ``arun``); never starts a run."""
        from .stores.offload import off_loop

        target = store if store is not None else self.store
        try:
            return await self.arun(None, run_id=run_id, store=store, owner=owner, stop=stop)
        except RunNotFound as exc:
            if type(exc) is not RunNotFound:
                raise
            raise await off_loop(target, _why_missing, run_id, target) from exc

    def send(
        self,
        run_id: str,
        message: str,
        *,
        max_turns: int | None = None,
        turns_per: TurnsPer = "request",
        message_id: str | None = None,
        create: bool = False,
        store: Store | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Continue the conversation ``run_id`` with a follow-up user message, and drive it like
        ``run``. A conversation that does not exist raises ``RunNotFound`` (it may be one the
        store lost: starting it over would repeat its side effects) unless ``create=True``, which
        starts it with the message as its task. The message is durable before the model sees
        it; if calls are in flight it is delivered once they are settled.
        ``max_turns`` (default: the agent's) counts for this request, or for the whole run with
        ``turns_per="run"``. A retry with the same ``message_id`` adds nothing. See
        docs/conversations.md."""
        with conversation.opened(
            self, run_id, message, max_turns, turns_per, message_id, create=create, store=store, owner=owner, stop=stop
        ) as session:
            drive_sync(session)
            return session.result(session.resume_seconds or session.since_start())

    async def asend(
        self,
        run_id: str,
        message: str,
        *,
        max_turns: int | None = None,
        turns_per: TurnsPer = "request",
        message_id: str | None = None,
        create: bool = False,
        store: Store | None = None,
        owner: str | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Async twin of ``send`` (drives the run like ``arun``)."""
        opened = conversation.opened(
            self, run_id, message, max_turns, turns_per, message_id, create=create, store=store, owner=owner, stop=stop
        )
        return await drive_async(opened, store if store is not None else self.store)

    @contextmanager
    def _hold(
        self,
        task: str | None,
        run_id: str | None,
        business_state: Mapping[str, JSONValue] | None,
        store: Store | None,
        owner: str | None,
        stop: threading.Event | None,
    ) -> Iterator[RunSession]:
        """Take the run's lease (heartbeat running), open or start the run; release on exit."""
        started = time.perf_counter()
        store = store if store is not None else self.store
        run_id = check_run_id(run_id) if run_id is not None else new_run_id()
        check_task(task)
        if task is None and not store.exists(run_id):
            raise RunNotFound(f"no run {run_id!r} to resume in {store.url}; give a task to start it")
        # A name per call unless given: the same name would re-enter a live lease (a worker's claim).
        call_owner = owner or make_owner()
        owners.begin_use(call_owner)  # alive to every taker until nothing of this call can act
        try:
            guard = take_lease(store, run_id, call_owner, self.lease_ttl, grace=self.lease_grace)
        except BaseException:
            owners.end_use(call_owner)
            raise
        session: RunSession | None = None
        try:
            with Heartbeat(guard) as heartbeat:
                session = RunSession(
                    self,
                    run_id,
                    guard.lease,
                    heartbeat,
                    store=store,
                    stop=stop if stop is not None else self.stop_requested,
                    started=started,
                )
                session.open(task, business_state)
                emitters.run_started(session)
                try:
                    with run_resources.scope(session):  # resource() for its tools; closed when the call ends
                        yield session
                except LeaseLost as exc:
                    emitters.lease_lost(session, exc)
                    emitters.run_ended(session, exc)
                    raise
                except BaseException as exc:
                    emitters.run_ended(session, exc)
                    raise
                emitters.run_ended(session, None)
        finally:
            # Released now only if no tool of this call that may act still runs (a thread left past
            # its timeout, or by Ctrl-C, SystemExit or a cancelled arun); else the lease expires
            # and is released when the last one returns. A name made for this call is then marked
            # ended, so a later call of this process may take the run over at once.
            guard.finish(owner_ends=owner is None)


@contextmanager
def _never_started(run_id: str, store: Store) -> Iterator[None]:
    """``resume``'s ``RunNotFound`` says why a run may be missing and what starting it would do."""
    try:
        yield
    except RunNotFound as exc:
        if type(exc) is not RunNotFound:
            raise
        raise _why_missing(run_id, store) from exc


def _why_missing(run_id: str, store: Store) -> Exception:
    """Why ``run_id`` is not in ``store``, for ``resume`` and ``aresume``: the store's own story
    (queued, records lost under a head), else what a missing run may mean and what starting it
    would do."""
    return missing_run(
        store,
        run_id,
        f"no run {run_id!r} to resume in {store.url}: it was never saved there, was deleted, or the store "
        "lost it (a server restarted without its data, keys evicted under memory pressure). resume() never "
        "starts a run; run(task, run_id=...) would start it from nothing, and any side effect it did before "
        "could run again",
    )
