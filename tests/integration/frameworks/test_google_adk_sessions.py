"""``UnbrokenSessionService`` against ADK's own ``InMemorySessionService`` on every store.

The google-adk sdist on PyPI ships no tests (its session-service contract tests live in its
repository only), so the contract here is differential: the same seeded random sequence of
operations (create, get with and without ``GetSessionConfig``, list, delete, append events with
``app:``/``user:``/``temp:``/session state deltas, ``get_user_state``) on ADK's reference service
and on ours gives the same observable results, on memory, SQLite, the file store, PostgreSQL,
Redis and S3. Then what a durable service adds: stale session objects refused, saves seen by
other instances, an event's scoped state written even when the process died right after the
event's own save."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.platform import time as adk_time
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types
from pgtest import fresh_schema

from unbroken import clock, open_store
from unbroken.integrations.google_adk import UnbrokenSessionService
from unbroken.stores.base import Store


class SteppedClock:
    """A wall clock that moves only when told to, shared by unbroken and ADK."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)

    def boot(self) -> tuple[str, float]:
        return "stepped", self.now


def _redis_url() -> str:
    server = os.environ.get("UNBROKEN_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    return f"{server}{'&' if '?' in server else '?'}prefix=ubadk-{uuid.uuid4().hex[:12]}&durability=none"


@pytest.fixture(
    params=["memory", "sqlite", "file", pytest.param("postgres", marks=pytest.mark.postgres), "redis", "s3"]
)
def open_one(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens a store on one fresh location (each call: another handle on the same one)."""
    with ExitStack() as stack:
        if request.param == "memory":
            shared = open_store("memory://")
            url = None
        elif request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'sessions.db'}"
        elif request.param == "file":
            url = f"file://{tmp_path / 'sessions'}"
        elif request.param == "postgres":
            url = stack.enter_context(fresh_schema("ubadk"))[1]
        elif request.param == "redis":
            url = _redis_url()
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
            import s3test

            endpoint = s3test.endpoint()
            url = s3test.store_url(endpoint, s3test.new_bucket(endpoint), prefix=f"t-{uuid.uuid4().hex[:12]}")
        opened: list[Store] = []

        def make() -> Store:
            store = shared if url is None else open_store(url)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()


# --------------------------------------------------------------------------- the differential test

USERS, SESSIONS = ("ann", "bob"), ("s1", "s2", "s3")
KEYS = ("app:mode", "app:n", "user:name", "user:n", "temp:scratch", "topic", "n", "nested")


def _value(rng: random.Random) -> Any:
    return rng.choice([rng.randint(-5, 5), f"v{rng.randint(0, 9)}", [1, "two"], {"a": {"b": rng.random()}}, None])


def _event(rng: random.Random, at: float) -> Event:
    delta = {key: _value(rng) for key in rng.sample(KEYS, rng.randint(0, 3))}
    text = types.Part(text=f"t{rng.randint(0, 99)}")
    call = types.Part(function_call=types.FunctionCall(id="call_0", name="charge", args={"amount": rng.randint(1, 9)}))
    blob = types.Part(inline_data=types.Blob(mime_type="image/png", data=bytes(rng.getrandbits(8) for _ in range(6))))
    return Event(
        id=f"e-{rng.getrandbits(64):016x}",
        author=rng.choice(["user", "agent"]),
        invocation_id=f"inv-{rng.randint(0, 3)}",
        timestamp=at,
        content=types.Content(role="model", parts=[rng.choice([text, call, blob])]),
        actions=EventActions(state_delta=delta),
    )


def _seen(result: Any) -> Any:
    """What a caller observes of a result, comparable across services."""
    if isinstance(result, Session):
        return result.model_dump(mode="json", exclude_none=True)
    if hasattr(result, "sessions"):
        return [session.model_dump(mode="json", exclude_none=True) for session in result.sessions]
    if isinstance(result, Event):
        return result.model_dump(mode="json", exclude_none=True)
    return result


async def _drive(service: BaseSessionService, seed: int, ticks: SteppedClock, steps: int) -> list[Any]:
    """Run the seed's operations on ``service``; return what each one returned (or raised)."""
    rng = random.Random(seed)
    apps = (f"app{seed}", f"app{seed}-other")  # each seed on apps of its own: one store serves all seeds
    live: dict[tuple[str, str, str], Session] = {}  # the session object a runner would hold
    seen: list[Any] = []
    for _ in range(steps):
        ticks.now += rng.choice([0.0, 0.5, 1.0])
        app, user, sid = rng.choice(apps), rng.choice(USERS), rng.choice(SESSIONS)
        op = rng.choice(["create", "create", "append", "append", "append", "get", "list", "delete", "user"])
        try:
            if op == "create":
                state = {key: _value(rng) for key in rng.sample(KEYS, rng.randint(0, 3))}
                result: Any = await service.create_session(app_name=app, user_id=user, state=state, session_id=sid)
                live[(app, user, sid)] = result
            elif op == "append":
                session = live.get((app, user, sid))
                if session is None:
                    continue
                result = await service.append_event(session, _event(rng, ticks.now))
                result = (result, session)
            elif op == "get":
                config = rng.choice(
                    [
                        None,
                        GetSessionConfig(num_recent_events=rng.randint(0, 3)),
                        GetSessionConfig(after_timestamp=ticks.now - rng.choice([0.0, 1.0, 3.0])),
                        GetSessionConfig(num_recent_events=2, after_timestamp=ticks.now - 2.0),
                    ]
                )
                result = await service.get_session(app_name=app, user_id=user, session_id=sid, config=config)
                if result is not None and config is None:
                    live[(app, user, sid)] = result
                elif result is None:
                    live.pop((app, user, sid), None)
            elif op == "list":
                result = await service.list_sessions(app_name=app, user_id=rng.choice([user, None]))
            elif op == "delete":
                await service.delete_session(app_name=app, user_id=user, session_id=sid)
                live.pop((app, user, sid), None)
                result = None
            else:
                result = await service.get_user_state(app_name=app, user_id=user)
        except (AlreadyExistsError, SessionNotFoundError) as exc:
            result = type(exc).__name__
        seen.append((op, [_seen(each) for each in result] if isinstance(result, tuple) else _seen(result)))
    return seen


def _run_both(store: Store, seed: int, steps: int) -> tuple[list[Any], list[Any]]:
    ticks = SteppedClock()

    async def both() -> tuple[list[Any], list[Any]]:
        adk_time.set_time_provider(ticks.wall)
        reference = await _drive(InMemorySessionService(), seed, ticks, steps)
        ticks.now = SteppedClock().now
        ours = await _drive(UnbrokenSessionService(store), seed, ticks, steps)
        return reference, ours

    with clock.using(ticks):
        return asyncio.run(both())


def test_the_same_operations_give_the_same_results_as_adks_in_memory_service(
    open_one: Callable[[], Store], request: pytest.FixtureRequest
) -> None:
    store = open_one()
    local = request.node.callspec.params["open_one"] in ("memory", "sqlite")
    for seed in (1, 2, 3) if local else (4,):  # a server's round trips: one shorter sequence
        steps = 70 if local else 40
        reference, ours = _run_both(store, seed, steps)
        assert len(ours) == len(reference) > steps // 2
        for step, (expected, got) in enumerate(zip(reference, ours, strict=True)):
            assert got == expected, f"seed {seed}, operation {step} ({expected[0]}) differs"


# --------------------------------------------------------------------------- what durability adds


def _message(text: str, at: float, delta: dict[str, Any] | None = None) -> Event:
    content = types.Content(role="user", parts=[types.Part(text=text)])
    return Event(
        author="user", invocation_id="i1", timestamp=at, content=content, actions=EventActions(state_delta=delta or {})
    )


def texts(session: Session) -> list[str | None]:
    return [part.text for event in session.events for part in (event.content.parts or [] if event.content else [])]


def test_saves_are_seen_by_another_service_and_a_stale_session_object_changes_nothing(
    open_one: Callable[[], Store],
) -> None:
    async def scenario() -> None:
        first, second = UnbrokenSessionService(open_one()), UnbrokenSessionService(open_one())
        created = await first.create_session(app_name="a", user_id="u", session_id="s", state={"user:plan": "pro"})
        await first.append_event(created, _message("one", 10.0, {"topic": "tax"}))
        mine = await second.get_session(app_name="a", user_id="u", session_id="s")
        assert mine is not None and texts(mine) == ["one"]
        assert mine.state == {"topic": "tax", "user:plan": "pro"}
        await second.append_event(mine, _message("two", 11.0))
        with pytest.raises(StaleSessionError):
            await first.append_event(created, _message("lost?", 12.0))  # it was read before "two"
        fresh = await first.get_session(app_name="a", user_id="u", session_id="s")
        assert fresh is not None and texts(fresh) == ["one", "two"]
        await first.append_event(fresh, _message("three", 13.0))  # re-read: accepted
        assert await second.get_user_state(app_name="a", user_id="u") == {"plan": "pro"}

    asyncio.run(scenario())


def test_an_event_delivered_twice_is_saved_once(open_one: Callable[[], Store]) -> None:
    async def scenario() -> None:
        service = UnbrokenSessionService(open_one())
        session = await service.create_session(app_name="a", user_id="u", session_id="s")
        event = _message("once", 10.0, {"app:count": 1})
        await service.append_event(session, event)
        await service.append_event(session, event.model_copy(deep=True))
        again = await service.get_session(app_name="a", user_id="u", session_id="s")
        assert again is not None and len(again.events) == 1 and again.state["app:count"] == 1

    asyncio.run(scenario())


def test_scoped_state_of_a_saved_event_survives_a_death_before_it_was_written(
    open_one: Callable[[], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store saves one run atomically: the event's save carries its app:/user: deltas as
    # pending; a process that dies before writing them leaves the mark, and the next reader
    # writes them (UnbrokenSessionService._settle).
    async def scenario() -> None:
        dying = UnbrokenSessionService(open_one())
        session = await dying.create_session(app_name="a", user_id="u", session_id="s")

        def die(*args: object) -> None:
            raise SystemExit("killed between the event's save and its scoped state")

        monkeypatch.setattr(dying, "_write_scoped", die)
        with pytest.raises(SystemExit):
            await dying.append_event(session, _message("pay", 10.0, {"app:rate": 3, "user:tier": "gold", "k": 1}))
        monkeypatch.undo()
        later = UnbrokenSessionService(open_one())
        assert await later.get_user_state(app_name="a", user_id="u") == {}  # not written yet ...
        found = await later.get_session(app_name="a", user_id="u", session_id="s")
        assert found is not None and len(found.events) == 1
        assert found.state == {"k": 1, "app:rate": 3, "user:tier": "gold"}  # ... written by the first reader
        assert await later.get_user_state(app_name="a", user_id="u") == {"tier": "gold"}
        other = await later.create_session(app_name="a", user_id="v")
        assert other.state == {"app:rate": 3}

    asyncio.run(scenario())
