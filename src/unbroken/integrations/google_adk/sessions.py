"""``UnbrokenSessionService(store)``: ADK's ``BaseSessionService`` on every unbroken store
(memory, SQLite, the file store, PostgreSQL, Redis, S3).

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
  next call that reads or appends to that session writes the deltas first (``_settle``): an
  event that was saved is never without its state.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import to_jsonable_python

from ... import clock
from ...state import JSONValue, RunState
from ...stores.base import Store
from ...stores.offload import off_loop
from .._runlog import RunLog, list_logs

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
        return await off_loop(self.store, self._create, app_name, user_id, state or {}, session_id)

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
        return await off_loop(self.store, self._get, app_name, user_id, session_id, config)

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
        return await off_loop(self.store, self._list, app_name, user_id)

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
        await off_loop(self.store, self._session_log(app_name, user_id, session_id).delete)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user-scoped state of ``user_id`` in ``app_name``, keys without ``user:``."""
        state = await off_loop(self.store, self._scoped_state, "user", app_name, user_id)
        return copy.deepcopy(state)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Save ``event`` to the session in one atomic save, durable when it returns, and apply
        it to ``session``. ``StaleSessionError`` when the session was changed since ``session``
        was read; ``SessionNotFoundError`` when it is gone. Partial events are not saved."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        saved = await off_loop(self.store, self._append, session, event)
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
        if not outcome.get("saved"):
            return False
        session.last_update_time = event.timestamp
        session._storage_update_marker = str(log.save_seq())
        return True


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
