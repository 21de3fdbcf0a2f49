"""Conversations: a run continued with follow-up user messages (``Agent.send``).

A run is one conversation: one history, one turn counter, one token count. ``send(run_id,
message)`` continues it:

* a run that ended (completed, max_turns, failed) or waits for the model gets the message
  appended to its history at once, in one save (label ``user_message``), and runs on;
* a run stopped in the middle of a turn (interrupted, paused, awaiting approval) first
  settles the calls in flight (a provider refuses a history with a call and no result): the
  message is queued durably (label ``message_queued``) and delivered, in a ``user_message``
  save, right before the next model call;
* a run that does not exist is ``RunNotFound`` (it may be one the store lost, whose side effects
  a fresh start would repeat), unless the caller asks to create it (``create=True``): then it is
  started with the message as its task.

``max_turns`` counts per request by default (each ``send`` may take that many turns), or per
run (``turns_per="run"``: the run's total). The limit is saved with the message, so a resume
after a crash keeps it. ``message_id`` makes a send safe to retry: a message whose id the run
already received is not added again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from .errors import ConfigError
from .missing import missing_run
from .state import JSONValue

if TYPE_CHECKING:
    from .runner import Agent
    from .session import RunSession
    from .stores.base import Store

TurnsPer = Literal["request", "run"]
KEEP_IDS = 100
"""How many received message ids a run remembers (older retries are not recognised)."""


def check(message: object, max_turns: int | None, turns_per: str) -> str:
    """Refuse bad arguments before anything is read or written."""
    if not isinstance(message, str) or not message.strip():
        raise ConfigError("a follow-up message must be a non-empty string")
    if max_turns is not None and (type(max_turns) is not int or max_turns < 1):
        raise ConfigError(f"max_turns must be a positive integer, not {max_turns!r}")
    if turns_per not in ("request", "run"):
        raise ConfigError(f"turns_per must be 'request' or 'run', not {turns_per!r}")
    return message


@contextmanager
def opened(
    agent: Agent,
    run_id: str,
    message: str,
    max_turns: int | None,
    turns_per: str,
    message_id: str | None,
    *,
    create: bool,
    store: Store | None,
    owner: str | None,
    stop: threading.Event | None,
) -> Iterator[RunSession]:
    """Hold ``run_id`` with ``message`` accepted (a new run, with ``create``: started with it as
    its task; without, ``RunNotFound`` and nothing written)."""
    check(message, max_turns, turns_per)
    target = store if store is not None else agent.store
    task = None if target.exists(run_id) else message
    if task is not None and not create:
        raise missing_run(
            target,
            run_id,
            f"no conversation {run_id!r} in {target.url}: it was never started there, was deleted, or the "
            "store lost it (a server restarted without its data, keys evicted). send() does not start one "
            "unless asked: send(run_id, message, create=True) starts it with this message as its task",
        )
    with agent._hold(task, run_id, None, store, owner, stop) as session:
        if task is None:
            accept(session, message, max_turns=max_turns, turns_per=turns_per, message_id=message_id)
        else:
            session.state.conversation = _new_limits({}, session, max_turns, turns_per, message_id)
        yield session


def accept(session: RunSession, message: str, *, max_turns: int | None, turns_per: str, message_id: str | None) -> bool:
    """Add ``message`` to the opened run (at once, or queued) and save it. False when the run
    had already received ``message_id`` (nothing is added; the run just goes on)."""
    state = session.state
    talk = dict(state.conversation or {})
    if message_id is not None and message_id in (talk.get("received") or []):
        return False
    if message_id is not None and state.conversation is None and message == state.task:
        return False  # the send that started this run, retried after a crash
    talk = _new_limits(talk, session, max_turns, turns_per, message_id)
    queued = [*(talk.get("inbox") or []), message]
    if state.finished or state.phase == "awaiting_model":
        state.conversation = {**talk, "inbox": []}
        _append(session, queued)  # with any message queued before the run stopped
        return True
    state.conversation = {**talk, "inbox": queued}
    session.save("message_queued")
    return True


def _new_limits(
    talk: dict[str, JSONValue], session: RunSession, max_turns: int | None, turns_per: str, message_id: str | None
) -> dict[str, JSONValue]:
    limit = max_turns if max_turns is not None else session.agent.max_turns
    talk = {**talk, "turn_limit": session.state.turns + limit if turns_per == "request" else limit}
    if message_id is not None:
        talk["received"] = [*(talk.get("received") or []), message_id][-KEEP_IDS:]
    return talk


def deliver(session: RunSession) -> None:
    """Before the next model call: append the queued messages to the history, in one save."""
    state = session.state
    talk = state.conversation or {}
    queued = list(talk.get("inbox") or [])
    if queued:
        state.conversation = {**talk, "inbox": []}
        _append(session, queued)


def pending(session: RunSession) -> bool:
    """Messages are queued for the next model call."""
    talk = session.state.conversation
    return bool(talk and talk.get("inbox"))


def turn_limit(session: RunSession) -> int:
    """The turn count at which the run stops (``max_turns``): the current request's limit, or
    the agent's ``max_turns`` for the whole run."""
    talk = session.state.conversation
    limit = talk.get("turn_limit") if talk else None
    return int(limit) if isinstance(limit, int) else session.agent.max_turns


def _append(session: RunSession, messages: list[str]) -> None:
    state = session.state
    for text in messages:
        state.messages.extend(session.agent.model.start_messages(text))
    state.phase = "awaiting_model"
    state.output = None
    state.error = None
    session.save("user_message")
