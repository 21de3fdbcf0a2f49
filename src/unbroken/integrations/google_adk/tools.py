"""``UnbrokenToolPlugin(store)``: an ADK plugin (``App(plugins=[...])``) that passes every
tool call through unbroken's effect ledger (``_effects``), in the session's run, keyed by the
call's occurrence: the session, the event holding the call (its position in the session's
events), the call's position in that event and the provider's id; never the id alone, which
models reuse. ``read_only`` tools run again; ``idempotent`` ones run again with the same
``current_call().idempotency_key``; a ``side_effect`` (the default) that was interrupted is
asked to its probe, and without one is answered UNKNOWN OUTCOME: never run twice.

What ADK does with a call a crash left without a response (measured, google-adk 2.13): a
resumable app resumed with ``invocation_id`` runs it again (the ledger then answers it, in
``before_tool_callback``); a new user message makes ADK drop it and ask the model again, which
makes the call again (so ``before_run_callback`` answers it in the session first).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions.session import Session
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from google.genai.types import FunctionCall
from pydantic_core import to_jsonable_python

from ...errors import ConfigError
from ...ledger import EffectLedger
from ...state import EFFECTS, Effect, JSONValue, LedgerEntry, ToolCall, occurrence_key
from ...stores.base import Store
from ...stores.offload import off_loop
from ...tools import Probe
from .. import _effects
from .._effects import CURRENT_CALL
from .sessions import session_run_id


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
        window = invocation_context.run_config.get_session_config if invocation_context.run_config else None
        if window is not None and (window.num_recent_events is not None or window.after_timestamp is not None):
            raise ConfigError(
                "UnbrokenToolPlugin keys each call by its event's position in the session, and"
                " RunConfig.get_session_config loads only part of it (the positions would shift between"
                " runs); run without get_session_config"
            )
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
        step = await off_loop(self.store, _effects.before, ledger, call, effect, self.probes.get(tool.name))
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
        await off_loop(self.store, _effects.after, ledger, step, call, content)
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        call = self.call_of(tool, tool_args, tool_context)
        if call.idempotency_key in self._running:
            step = self._running.pop(call.idempotency_key)
            CURRENT_CALL.set(None)
            # It may have acted before raising (or being cancelled): unknown from now on.
            await off_loop(self.store, _effects.interrupted, EffectLedger(self.store, _run_of(tool_context)), step)
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
        if await off_loop(plugin.store, ledger.get, tool_call.idempotency_key) is None:
            continue
        step = await off_loop(plugin.store, _effects.before, ledger, tool_call, "side_effect", plugin.probes.get(name))
        if isinstance(step, _effects.Answered):
            content, is_error = step.content, step.is_error
        else:  # the probe found it was not made: say so, the model may ask for it again
            content, is_error = f"NOT EXECUTED: {name} was interrupted before it acted; nothing was done", True
            await off_loop(plugin.store, _effects.after, ledger, step, tool_call, content, is_error)
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
