"""``UnbrokenToolPlugin`` in one process (the kill tests are in test_google_adk_durable.py):
which calls a crash left unanswered, with reused ids; a tool that raised is never run again;
effect classes checked when the plugin is made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from unbroken import ConfigError, open_store
from unbroken.integrations.google_adk import (
    UnbrokenSessionService,
    UnbrokenToolPlugin,
    interrupted_calls,
    session_run_id,
)


def _call(call_id: str, amount: int) -> Event:
    part = types.Part(function_call=types.FunctionCall(id=call_id, name="charge", args={"amount": amount}))
    return Event(author="agent", invocation_id="i", content=types.Content(role="model", parts=[part]))


def _answer(call_id: str) -> Event:
    part = types.Part(function_response=types.FunctionResponse(id=call_id, name="charge", response={"ok": True}))
    return Event(author="agent", invocation_id="i", content=types.Content(role="user", parts=[part]))


def test_a_reused_id_is_paired_by_occurrence_not_by_id() -> None:
    # ADK's own pruning asks "is there a response with this id anywhere?": the second call_0
    # would count as answered. Paired by occurrence, it is the one left open.
    events = [_call("call_0", 5), _answer("call_0"), _call("call_0", 7)]
    session = Session(id="s", app_name="a", user_id="u", events=events)
    [(index, position, call)] = interrupted_calls(session)
    assert (index, position, call.args) == (2, 0, {"amount": 7})
    assert interrupted_calls(Session(id="s", app_name="a", user_id="u", events=[*events, _answer("call_0")])) == []


def test_a_long_running_call_is_not_interrupted() -> None:
    waiting = _call("call_9", 1)
    waiting.long_running_tool_ids = {"call_9"}
    assert interrupted_calls(Session(id="s", app_name="a", user_id="u", events=[waiting])) == []


def test_an_unknown_effect_class_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match="read_only"):
        UnbrokenToolPlugin(open_store("memory://"), effects={"charge": "maybe"})  # type: ignore[dict-item]


class _PaysOnce(BaseLlm):
    """Calls ``charge`` (call_0) until the session holds a response to it, then says "done"."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answered = any(part.function_response for content in llm_request.contents for part in content.parts or [])
        if answered:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
        else:
            call = types.FunctionCall(id="call_0", name="charge", args={"amount": 5})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def test_a_tool_that_raised_is_answered_unknown_and_never_run_again() -> None:
    attempts: list[int] = []

    def charge(amount: int) -> dict[str, Any]:
        """Charge the card."""
        attempts.append(amount)
        raise ConnectionError("the bank hung up after the charge?")

    async def scenario() -> list[Any]:
        store = open_store("memory://")
        sessions = UnbrokenSessionService(store)
        app = App(
            name="pay",
            root_agent=LlmAgent(name="payer", model=_PaysOnce(), tools=[charge]),
            plugins=[UnbrokenToolPlugin(store)],
        )
        runner = Runner(app=app, session_service=sessions)
        await sessions.create_session(app_name="pay", user_id="me", session_id="s")
        message = types.Content(role="user", parts=[types.Part(text="pay")])
        with pytest.raises(ConnectionError):
            async for _ in runner.run_async(user_id="me", session_id="s", new_message=message):
                pass
        again = types.Content(role="user", parts=[types.Part(text="go on")])
        async for _ in runner.run_async(user_id="me", session_id="s", new_message=again):
            pass
        session = await sessions.get_session(app_name="pay", user_id="me", session_id="s")
        assert session is not None
        [entry] = store.ledger_list(session_run_id("pay", "me", "s"))
        assert entry.status == "unknown"
        return [
            part.function_response.response
            for event in session.events
            for part in (event.content.parts or [] if event.content else [])
            if part.function_response
        ]

    responses = asyncio.run(scenario())
    assert attempts == [5]  # the second run did not charge again
    assert len(responses) == 1 and str(responses[0]["error"]).startswith("UNKNOWN OUTCOME")


def test_a_session_loaded_in_part_is_refused_before_anything_runs() -> None:
    # Keys count an event's position in the session: a window would shift them between runs.
    attempts: list[int] = []

    def charge(amount: int) -> dict[str, Any]:
        """Charge the card."""
        attempts.append(amount)
        return {"charged": amount}

    async def scenario() -> None:
        store = open_store("memory://")
        sessions = UnbrokenSessionService(store)
        agent = LlmAgent(name="payer", model=_PaysOnce(), tools=[charge])
        runner = Runner(
            app=App(name="pay", root_agent=agent, plugins=[UnbrokenToolPlugin(store)]), session_service=sessions
        )
        await sessions.create_session(app_name="pay", user_id="me", session_id="s")
        window = RunConfig(get_session_config=GetSessionConfig(num_recent_events=10))
        message = types.Content(role="user", parts=[types.Part(text="pay")])
        with pytest.raises(Exception, match="get_session_config") as refused:
            async for _ in runner.run_async(user_id="me", session_id="s", new_message=message, run_config=window):
                pass
        assert isinstance(refused.value, ConfigError) or isinstance(refused.value.__cause__, ConfigError)

    asyncio.run(scenario())
    assert attempts == []
