"""Google ADK on unbroken: its sessions in any unbroken store, its tools at most once.

``UnbrokenSessionService(store)`` is ADK's ``BaseSessionService`` on every unbroken store
(memory, SQLite, the file store, PostgreSQL, Redis, S3):

* Each session is one append-only log (``_runlog.RunLog``, an unbroken run): its events, in
  ADK's own JSON form, and a head with the session's own state and last update time. An
  ``append_event`` is one atomic save, durable when it returns, conditional on the revision
  the caller's session object was read at: a stale object gets ADK's ``StaleSessionError``
  and changes nothing.
* ``app:`` and ``user:`` state live in logs of their own (one per app, one per app and user)
  and ``temp:`` state is never stored, as ADK's own services do. The store saves one run
  atomically, not three: an event whose delta names ``app:`` or ``user:`` keys is saved with
  those deltas marked pending in its session's head; they are then written to the app and
  user logs and the mark is cleared. A process that dies in between leaves the mark, and the
  next call that reads or appends to that session writes the deltas first: an event that was
  saved is never without its state.

``UnbrokenToolPlugin(store)`` is an ADK plugin (``App(plugins=[...])``) that passes every tool
call through unbroken's effect ledger (``_effects``), in the session's run, keyed by the call's
occurrence: the session, the event holding the call (its position in the session's events),
the call's position in that event and the provider's id; never the id alone, which models
reuse. ``read_only`` tools run again; ``idempotent`` ones run again with the same
``current_call().idempotency_key``; a ``side_effect`` (the default) that was interrupted, which
a resumable ADK app re-runs when it resumes the invocation, is asked to its probe, and without
one is answered UNKNOWN OUTCOME: never run twice.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from google.genai.types import FunctionCall
from pydantic_core import to_jsonable_python

from .. import clock
from ..errors import ConfigError
from ..ledger import EffectLedger
from ..state import EFFECTS, Effect, JSONValue, LedgerEntry, RunState, ToolCall, occurrence_key
from ..stores.base import Store
from ..tools import Probe
from . import _effects
from ._effects import CURRENT_CALL, current_call
from ._runlog import RunLog, list_logs

PREFIX = "adk."
_SCOPES = ("app", "user")


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def session_run_id(app_name: str, user_id: str, session_id: str) -> str:
    """The run id of a session's log (and of its effect ledger)."""
    return f"{PREFIX}s.{_hash(app_name)}.{_hash(user_id)}.{_hash(session_id)}"


def _app_run_id(app_name: str) -> str:
    return f"{PREFIX}a.{_hash(app_name)}"


def _user_run_id(app_name: str, user_id: str) -> str:
    return f"{PREFIX}u.{_hash(app_name)}.{_hash(user_id)}"


def _split(delta: Mapping[str, Any]) -> dict[str, dict[str, JSONValue]]:
    """A state delta by scope (``app``, ``user``, ``session``), prefixes removed, ``temp:`` keys
    dropped, values in JSON form (as ADK's own stores write them)."""
    parts: dict[str, dict[str, JSONValue]] = {"app": {}, "user": {}, "session": {}}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            parts["app"][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            parts["user"][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            parts["session"][key] = value
    plain: dict[str, dict[str, JSONValue]] = to_jsonable_python(parts)
    return plain


def _dict(value: JSONValue) -> dict[str, JSONValue]:
    return dict(value) if isinstance(value, dict) else {}


class UnbrokenSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` on an unbroken ``Store`` (see the module docstring).

    Safe to share between the tasks and threads of one process, and between processes on
    one store; the store's calls run in a worker thread, so the event loop never waits on
    a disk or a network."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._logs: dict[str, RunLog] = {}
        self._lock = threading.Lock()

    def _log(self, run_id: str, kind: str) -> RunLog:
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                log = self._logs[run_id] = RunLog(self.store, run_id, kind=kind)
            return log

    def _session_log(self, app_name: str, user_id: str, session_id: str) -> RunLog:
        return self._log(session_run_id(app_name, user_id, session_id), "adk-session")

    def _scope_log(self, scope: str, app_name: str, user_id: str) -> RunLog:
        if scope == "app":
            return self._log(_app_run_id(app_name), "adk-app-state")
        return self._log(_user_run_id(app_name, user_id), "adk-user-state")

    # ------------------------------------------------------------------ scoped state

    def _scoped_state(self, scope: str, app_name: str, user_id: str) -> dict[str, JSONValue]:
        log = self._scope_log(scope, app_name, user_id)
        log.refresh_if_changed()
        return _dict(log.head().get("state"))

    def _write_scoped(self, app_name: str, user_id: str, deltas: Mapping[str, JSONValue]) -> None:
        for scope in _SCOPES:
            delta = _dict(deltas.get(scope, {}))
            if not delta:
                continue
            log = self._scope_log(scope, app_name, user_id)
            log.refresh_if_changed()

            def change(
                state: RunState, delta: dict[str, JSONValue] = delta
            ) -> tuple[list[JSONValue], dict[str, JSONValue]]:
                merged = {**_dict(state.business_state.get("state")), **delta}
                return [], {"app_name": app_name, "user_id": user_id, "state": merged}

            log.update(change)

    def _settle(self, log: RunLog) -> None:
        """Write the ``app:``/``user:`` deltas a saved event left pending (a process died
        between its save and theirs), then clear the mark."""
        head = log.head()
        pending = head.get("pending")
        if not pending:
            return
        self._write_scoped(str(head["app_name"]), str(head["user_id"]), _dict(pending))

        def change(state: RunState) -> tuple[list[JSONValue], dict[str, JSONValue] | None]:
            if state.business_state.get("pending") != pending:
                return [], None
            return [], {key: value for key, value in state.business_state.items() if key != "pending"}

        log.update(change)

    def _open(self, app_name: str, user_id: str, session_id: str) -> RunLog | None:
        """The session's log, current and settled; None when there is no such session."""
        log = self._session_log(app_name, user_id, session_id)
        log.refresh_if_changed()
        if not log.exists():
            return None
        self._settle(log)
        return log

    def _merged(self, app_name: str, user_id: str, session_state: Mapping[str, JSONValue]) -> dict[str, Any]:
        state: dict[str, Any] = copy.deepcopy(dict(session_state))
        for key, value in self._scoped_state("app", app_name, user_id).items():
            state[State.APP_PREFIX + key] = copy.deepcopy(value)
        for key, value in self._scoped_state("user", app_name, user_id).items():
            state[State.USER_PREFIX + key] = copy.deepcopy(value)
        return state

    def _session(self, log: RunLog, events: list[Event]) -> Session:
        head = log.head()
        app_name, user_id = str(head["app_name"]), str(head["user_id"])
        updated = head.get("last_update_time")
        session = Session(
            id=str(head["id"]),
            app_name=app_name,
            user_id=user_id,
            state=self._merged(app_name, user_id, _dict(head.get("state"))),
            events=events,
            last_update_time=float(updated) if isinstance(updated, (int, float)) else 0.0,
        )
        session._storage_update_marker = str(log.save_seq())
        return session

    # ------------------------------------------------------------------ the service

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None, session_id: str | None = None
    ) -> Session:
        """A new session, saved (durable) when it returns; ``AlreadyExistsError`` if the id is taken."""
        return await asyncio.to_thread(self._create, app_name, user_id, state or {}, session_id)

    def _create(self, app_name: str, user_id: str, state: dict[str, Any], session_id: str | None) -> Session:
        session_id = (session_id.strip() if session_id else "") or str(uuid.uuid4())
        log = self._session_log(app_name, user_id, session_id)
        deltas = _split(state)
        scoped: dict[str, JSONValue] = {scope: deltas[scope] for scope in _SCOPES if deltas[scope]}
        now = clock.wall()

        def change(current: RunState) -> tuple[list[JSONValue], dict[str, JSONValue]]:
            if current.save_seq:
                raise AlreadyExistsError(f"Session with id {session_id} already exists.")
            head: dict[str, JSONValue] = {
                "app_name": app_name,
                "user_id": user_id,
                "id": session_id,
                "state": dict(deltas["session"]),
                "last_update_time": now,
            }
            if scoped:
                head["pending"] = scoped
            return [], head

        log.refresh()
        log.update(change)
        self._settle(log)
        return self._session(log, [])

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None = None
    ) -> Session | None:
        """The session with its events (filtered by ``config``) and merged state, or None."""
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    def _get(self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        log = self._open(app_name, user_id, session_id)
        if log is None:
            return None
        items = log.items()
        if config is not None and config.num_recent_events is not None:
            items = items[len(items) - config.num_recent_events :] if config.num_recent_events else []
        events = [Event.model_validate(item) for item in items]
        if config is not None and config.after_timestamp is not None:
            index = len(events) - 1
            while index >= 0 and events[index].timestamp >= config.after_timestamp:
                index -= 1
            events = events[index + 1 :]
        return self._session(log, events)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The sessions of the app (of one user when ``user_id`` is given), without events,
        oldest update first."""
        return await asyncio.to_thread(self._list, app_name, user_id)

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        prefix = f"{PREFIX}s.{_hash(app_name)}." + (f"{_hash(user_id)}." if user_id is not None else "")
        sessions: list[Session] = []
        for run_id in list_logs(self.store, prefix):
            log = self._log(run_id, "adk-session")
            log.refresh_if_changed()
            head = log.head()
            if not log.exists() or head.get("app_name") != app_name:
                continue
            self._settle(log)
            sessions.append(self._session(log, []))
        sessions.sort(key=lambda session: (session.last_update_time, session.user_id, session.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Remove the session, its events and its effect ledger. Safe to call twice."""
        session_id = session_id.strip() if session_id else session_id
        await asyncio.to_thread(self._session_log(app_name, user_id, session_id).delete)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user-scoped state of ``user_id`` in ``app_name``, keys without ``user:``."""
        state = await asyncio.to_thread(self._scoped_state, "user", app_name, user_id)
        return copy.deepcopy(state)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Save ``event`` to the session in one atomic save, durable when it returns, and apply
        it to ``session``. ``StaleSessionError`` when the session was changed since ``session``
        was read; ``SessionNotFoundError`` when it is gone. Partial events are not saved."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        saved = await asyncio.to_thread(self._append, session, event)
        if saved:
            self._commit_event_to_session(session, event)
        return event

    def _append(self, session: Session, event: Event) -> bool:
        log = self._open(session.app_name, session.user_id, session.id)
        if log is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        item: JSONValue = json.loads(event.model_dump_json(exclude_none=True))
        deltas = _split(event.actions.state_delta if event.actions and event.actions.state_delta else {})
        scoped: dict[str, JSONValue] = {scope: deltas[scope] for scope in _SCOPES if deltas[scope]}
        marker = session._storage_update_marker
        outcome: dict[str, bool] = {}

        def change(state: RunState) -> tuple[list[JSONValue], dict[str, JSONValue] | None]:
            head = state.business_state
            if not state.save_seq:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            events = state.messages
            if any(isinstance(each, dict) and each.get("id") == event.id and each == item for each in events):
                outcome["saved"] = False  # a re-delivery of a saved event: nothing twice
                return [], None
            if marker is not None and marker != str(state.save_seq):
                raise StaleSessionError(_STALE)
            if marker is None and not _matches(session, events, head):
                raise StaleSessionError(_STALE)
            new_head: dict[str, JSONValue] = {
                **head,
                "state": {**_dict(head.get("state")), **deltas["session"]},
                "last_update_time": event.timestamp,
            }
            if scoped:
                new_head["pending"] = scoped
            outcome["saved"] = True
            return [item], new_head

        log.update(change)  # on a concurrent save: re-read, and the revision check decides
        if scoped and outcome.get("saved"):
            self._settle(log)
        session.last_update_time = event.timestamp
        session._storage_update_marker = str(log.save_seq())
        return outcome.get("saved", False)


_STALE = (
    "The session was changed since this session object was read (another writer appended to it);"
    " get the session again and retry."
)


def _matches(session: Session, events: list[JSONValue], head: Mapping[str, JSONValue]) -> bool:
    """For a session object made by hand (no revision marker): it is current when its last
    event is the stored last event, or the store has moved no further than its update time."""
    updated = head.get("last_update_time")
    if isinstance(updated, (int, float)) and updated <= session.last_update_time:
        return True
    if not session.events:
        return not events
    last = events[-1] if events else None
    return isinstance(last, dict) and last.get("id") == session.events[-1].id


# ---------------------------------------------------------------------- tools through the ledger


class UnbrokenToolPlugin(BasePlugin):
    """An ADK plugin that makes tools at most once, by effect class (see the module docstring).

    ``effects`` gives each tool's class by name (undeclared tools are side effects); ``probes``
    a side effect's probe, asked when a crash left its outcome in doubt. Inside a tool,
    ``current_call().idempotency_key`` is the call's key. Use the same ``store`` as the
    runner's ``UnbrokenSessionService``: the ledger lives in the session's run."""

    def __init__(
        self,
        store: Store,
        *,
        effects: Mapping[str, Effect] | None = None,
        probes: Mapping[str, Probe] | None = None,
        name: str = "unbroken_effects",
    ) -> None:
        super().__init__(name=name)
        for tool_name, effect in (effects or {}).items():
            if effect not in EFFECTS:
                raise ConfigError(f"effect of tool {tool_name!r} must be one of {', '.join(EFFECTS)}, not {effect!r}")
        self.store = store
        self.effects = dict(effects or {})
        self.probes = dict(probes or {})
        self._running: dict[str, LedgerEntry | None] = {}

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        """Before ADK runs the agent again on a session: answer the calls a crash left without
        a response (ADK drops them and asks the model again, which calls them again)."""
        await answer_interrupted_calls(self, invocation_context)
        return None

    def call_of(self, tool: BaseTool, tool_args: Mapping[str, Any], tool_context: ToolContext) -> ToolCall:
        """The call being run, keyed by its occurrence in the session's events."""
        session = tool_context.session
        call_id = tool_context.function_call_id or ""
        run_id = session_run_id(session.app_name, session.user_id, session.id)
        arguments: dict[str, JSONValue] = to_jsonable_python(dict(tool_args))
        for index in range(len(session.events) - 1, -1, -1):
            calls = session.events[index].get_function_calls()
            matching = [
                position for position, call in enumerate(calls) if call.id == call_id and call.name == tool.name
            ]
            if not matching:
                continue
            exact = [position for position in matching if to_jsonable_python(calls[position].args or {}) == arguments]
            position = (exact or matching)[0]
            return ToolCall(call_id, tool.name, arguments, occurrence_key(run_id, index, position, call_id))
        raise ConfigError(
            f"tool call {call_id} ({tool.name}) is not in the session's events; "
            "run the agent through a Runner whose session service saves events before tools run"
        )

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        call = self.call_of(tool, tool_args, tool_context)
        session = tool_context.session
        ledger = EffectLedger(self.store, session_run_id(session.app_name, session.user_id, session.id))
        effect = self.effects.get(tool.name, "side_effect")
        step = await asyncio.to_thread(_effects.before, ledger, call, effect, self.probes.get(tool.name))
        if isinstance(step, _effects.Answered):
            return _response(step.content, step.is_error)
        self._running[call.idempotency_key] = step
        CURRENT_CALL.set(call)
        return None

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        call = self.call_of(tool, tool_args, tool_context)
        if call.idempotency_key not in self._running:
            return None  # answered from the ledger: nothing ran
        step = self._running.pop(call.idempotency_key)
        CURRENT_CALL.set(None)
        ledger = EffectLedger(self.store, _run_of(tool_context))
        content = json.dumps(to_jsonable_python(result))
        await asyncio.to_thread(_effects.after, ledger, step, call, content)
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        call = self.call_of(tool, tool_args, tool_context)
        if call.idempotency_key in self._running:
            step = self._running.pop(call.idempotency_key)
            CURRENT_CALL.set(None)
            # It may have acted before raising (or being cancelled): unknown from now on.
            await asyncio.to_thread(_effects.interrupted, EffectLedger(self.store, _run_of(tool_context)), step)
        return None


def interrupted_calls(session: Session) -> list[tuple[int, int, FunctionCall]]:
    """The function calls of ``session`` that no response answers, as (event position, call
    position, call): a response answers the latest unanswered call with its id, so a reused
    id (``call_0``) is paired by occurrence. Long-running calls (which answer later) are left out."""
    open_calls: list[tuple[int, int, FunctionCall]] = []
    waiting: set[str] = set()
    for index, event in enumerate(session.events):
        waiting |= set(event.long_running_tool_ids or ())
        for response in event.get_function_responses():
            for place in range(len(open_calls) - 1, -1, -1):
                if open_calls[place][2].id == response.id:
                    del open_calls[place]
                    break
        for position, call in enumerate(event.get_function_calls()):
            if call.id:
                open_calls.append((index, position, call))
    return [each for each in open_calls if each[2].id not in waiting]


async def answer_interrupted_calls(plugin: UnbrokenToolPlugin, invocation_context: InvocationContext) -> int:
    """Answer, in the session, each interrupted call the ledger knows of: a settled one with its
    recorded result; one in doubt with its probe's answer, or UNKNOWN OUTCOME. A call the ledger
    never saw had not started: it is left to ADK (which drops it). Returns how many were answered.

    The one place the plugin reconciles a crash; switched off, ADK asks the model again and a
    side effect is made twice."""
    session = invocation_context.session
    run_id = session_run_id(session.app_name, session.user_id, session.id)
    ledger = EffectLedger(plugin.store, run_id)
    answered = 0
    for index, position, call in interrupted_calls(session):
        arguments: dict[str, JSONValue] = to_jsonable_python(dict(call.args or {}))
        name, call_id = call.name or "", call.id or ""
        tool_call = ToolCall(call_id, name, arguments, occurrence_key(run_id, index, position, call_id))
        if await asyncio.to_thread(ledger.get, tool_call.idempotency_key) is None:
            continue
        step = await asyncio.to_thread(_effects.before, ledger, tool_call, "side_effect", plugin.probes.get(name))
        if isinstance(step, _effects.Answered):
            content, is_error = step.content, step.is_error
        else:  # the probe found it was not made: say so, the model may ask for it again
            content, is_error = f"NOT EXECUTED: {name} was interrupted before it acted; nothing was done", True
            await asyncio.to_thread(_effects.after, ledger, step, tool_call, content, is_error)
        calling = session.events[index]
        response = types.FunctionResponse(id=call_id, name=name, response=_response(content, is_error))
        event = Event(
            invocation_id=calling.invocation_id,
            author=calling.author,
            branch=calling.branch,
            content=types.Content(role="user", parts=[types.Part(function_response=response)]),
        )
        await invocation_context.session_service.append_event(session, event)
        answered += 1
    return answered


def _run_of(tool_context: ToolContext) -> str:
    session = tool_context.session
    return session_run_id(session.app_name, session.user_id, session.id)


def _response(content: str, is_error: bool) -> dict[str, Any]:
    """A tool response for ADK from a recorded result (the tool's own dict when it was one)."""
    if not is_error:
        try:
            recorded = json.loads(content)
        except ValueError:
            recorded = None
        if isinstance(recorded, dict):
            return recorded
        return {"result": content}
    return {"error": content}


__all__ = ["UnbrokenSessionService", "UnbrokenToolPlugin", "current_call", "session_run_id"]
