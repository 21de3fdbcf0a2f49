"""A Google ADK agent in a process of its own, its session in an unbroken store: a scripted
model (a ``BaseLlm`` that answers from the session's contents, no network) pays twice,
reusing the call id ``call_0``, then says "done". ``charge`` records each payment in a journal
(the outside service) and kills its own process (SIGKILL) right after the payment when
``KILL_AFTER_PAYMENT`` names that payment's number.

The first run starts the session with a user message; a later run on the same session resumes
it as an operator would after a crash: a resumable app (``ResumabilityConfig``) resumes its
last invocation (``run_async(invocation_id=...)``), another gets a new user message, "go on".
A session that holds the final answer is reported, not run.

argv: store URL, journal path, session id, "probe" / "no-probe" (with ``UnbrokenToolPlugin``)
or "adk" (ADK alone: no plugin), "resumable" / "not-resumable". Prints one JSON line: the
final text, whether it resumed, and the responses the session holds for the payments."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from unbroken import Found, NotExecuted, ToolCall, open_store
from unbroken.integrations.google_adk import UnbrokenSessionService, UnbrokenToolPlugin, current_call

warnings.simplefilter("ignore")  # ADK marks resumability experimental
url, journal_path, session_id, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
resumable = sys.argv[5] == "resumable"


def journal() -> list[dict[str, Any]]:
    if not journal_path.exists():
        return []
    return [json.loads(line) for line in journal_path.read_text().splitlines()]


class ScriptedModel(BaseLlm):
    """Pays 5, then 7, both as ``call_0``, then answers "done"."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answered = sum(1 for content in llm_request.contents for part in content.parts or [] if part.function_response)
        if answered < 2:
            call = types.FunctionCall(id="call_0", name="charge", args={"amount": 5 + 2 * answered})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
        else:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))


def charge(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    """Charge the card."""
    key = current_call().idempotency_key if mode != "adk" else tool_context.function_call_id
    with journal_path.open("a") as out:
        out.write(json.dumps({"amount": amount, "key": key}) + "\n")
        out.flush()
        os.fsync(out.fileno())
    if os.environ.get("KILL_AFTER_PAYMENT") == str(len(journal())):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"charged": amount}


def charged(call: ToolCall) -> Found | NotExecuted:
    for payment in journal():
        if payment["key"] == call.idempotency_key:
            return Found({"charged": payment["amount"]})
    return NotExecuted()


async def main() -> None:
    store = open_store(url)
    sessions = UnbrokenSessionService(store)
    plugins: list[BasePlugin] = (
        [] if mode == "adk" else [UnbrokenToolPlugin(store, probes={"charge": charged} if mode == "probe" else {})]
    )
    agent = LlmAgent(name="payer", model=ScriptedModel(), tools=[charge])
    resumability = ResumabilityConfig(is_resumable=True) if resumable else None
    app = App(name="payments", root_agent=agent, plugins=plugins, resumability_config=resumability)
    runner = Runner(app=app, session_service=sessions)
    session = await sessions.get_session(app_name="payments", user_id="me", session_id=session_id)
    resumed = session is not None
    if session is None:
        await sessions.create_session(app_name="payments", user_id="me", session_id=session_id)
        run = runner.run_async(
            user_id="me", session_id=session_id, new_message=types.Content(role="user", parts=[types.Part(text="pay")])
        )
    elif any(
        part.text == "done" for event in session.events for part in (event.content.parts or [] if event.content else [])
    ):
        run = None  # finished: nothing to run
        resumed = False
    elif resumable:
        run = runner.run_async(user_id="me", session_id=session_id, invocation_id=session.events[-1].invocation_id)
    else:  # not resumable: the user says so
        message = types.Content(role="user", parts=[types.Part(text="go on")])
        run = runner.run_async(user_id="me", session_id=session_id, new_message=message)
    final = None
    if run is not None:
        async for event in run:
            if event.is_final_response() and event.content and event.content.parts:
                final = event.content.parts[0].text
    session = await sessions.get_session(app_name="payments", user_id="me", session_id=session_id)
    assert session is not None
    responses = [
        part.function_response.response
        for event in session.events
        for part in (event.content.parts or [] if event.content else [])
        if part.function_response
    ]
    texts = [
        part.text
        for event in session.events
        for part in (event.content.parts or [] if event.content else [])
        if part.text
    ]
    print(json.dumps({"final": final or (texts[-1] if texts else None), "resumed": resumed, "responses": responses}))


asyncio.run(main())
