"""LangGraph tool calls through unbroken's effect ledger: a ``wrap_tool_call`` for ``ToolNode``.

Each call is keyed by its occurrence, never by the provider's id alone (servers reuse
``call_0`` in every answer): the thread's run, the graph step that runs it, the task's
namespace (its deterministic task id: the same when a resumed graph runs that task again), the
call's position in the AI message that made it, and the provider's id. The ledger rule is the
one every integration uses (``_effects``): read_only runs; a settled call is answered with its
recorded result; an interrupted side effect is asked to its probe or reported UNKNOWN OUTCOME.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, ToolMessage

from ..errors import ConfigError
from ..ledger import EffectLedger
from ..state import EFFECTS, Effect, ToolCall, occurrence_key
from ..stores.base import Store
from ..tools import Probe
from . import _effects
from ._runlog import log_id

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

LOG_PREFIX = "langgraph."  # the saver's: a thread's ledger is its run's (deleted with the thread)


class DurableToolCalls:
    """``ToolNode(tools, wrap_tool_call=calls, awrap_tool_call=calls.awrap)``: every call of
    those tools goes through the effect ledger of its thread's run in ``store`` (the
    ``UnbrokenSaver``'s store). ``effects`` declares each tool's class (undeclared:
    ``side_effect``, never re-run blindly); ``probes`` answers, for an interrupted side effect,
    whether it took effect. ``messages_key`` is the state key holding the messages."""

    def __init__(
        self,
        store: Store,
        *,
        effects: Mapping[str, Effect] | None = None,
        probes: Mapping[str, Probe] | None = None,
        messages_key: str = "messages",
    ) -> None:
        self.store = store
        self.effects = dict(effects or {})
        self.probes = dict(probes or {})
        self.messages_key = messages_key
        for name, declared in self.effects.items():
            if declared not in EFFECTS:
                raise ConfigError(f"effects[{name!r}] must be one of {', '.join(EFFECTS)}, not {declared!r}")
            if name in self.probes and declared != "side_effect":
                raise ConfigError(f"tool {name!r} is {declared}; a probe only makes sense for a side_effect tool")

    def __call__(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        call, effect, ledger = self._prepare(request)
        decided = _effects.before(ledger, call, effect, self.probes.get(call.name))
        if isinstance(decided, _effects.Answered):
            return _message(call, decided)
        token = _effects.CURRENT_CALL.set(call)
        try:
            result = execute(request)
        except BaseException:
            _effects.interrupted(ledger, decided)
            raise
        finally:
            _effects.CURRENT_CALL.reset(token)
        _effects.after(ledger, decided, call, *_outcome(result))
        return result

    async def awrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
    ) -> ToolMessage | Command[Any]:
        """The async twin of ``__call__`` (same steps; the store calls block, as the saver's do)."""
        call, effect, ledger = self._prepare(request)
        decided = _effects.before(ledger, call, effect, self.probes.get(call.name))
        if isinstance(decided, _effects.Answered):
            return _message(call, decided)
        token = _effects.CURRENT_CALL.set(call)
        try:
            result = await execute(request)
        except BaseException:
            _effects.interrupted(ledger, decided)
            raise
        finally:
            _effects.CURRENT_CALL.reset(token)
        _effects.after(ledger, decided, call, *_outcome(result))
        return result

    def _prepare(self, request: ToolCallRequest) -> tuple[ToolCall, Effect, EffectLedger]:
        tool_call = request.tool_call
        config = request.runtime.config if request.runtime is not None else {}
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if thread_id is None:
            raise ConfigError(
                "durable tool calls need a thread: invoke the graph with {'configurable': {'thread_id': ...}}"
            )
        run_id = log_id(LOG_PREFIX, str(thread_id))
        arguments = dict(tool_call.get("args") or {})
        call = ToolCall(
            id=str(tool_call.get("id")),
            name=tool_call["name"],
            input=arguments,
            idempotency_key=call_key(run_id, config, self._position(request), str(tool_call.get("id"))),
        )
        return call, self.effects.get(call.name, "side_effect"), EffectLedger(self.store, run_id)

    def _position(self, request: ToolCallRequest) -> int:
        """The call's position among the tool calls of the newest AI message that made it."""
        state = request.state
        messages = state.get(self.messages_key) if isinstance(state, dict) else getattr(state, self.messages_key, state)
        wanted = request.tool_call
        for message in reversed(messages if isinstance(messages, list) else []):
            if not isinstance(message, AIMessage):
                continue
            for position, made in enumerate(message.tool_calls):
                if (made.get("id"), made["name"], made["args"]) == (wanted.get("id"), wanted["name"], wanted["args"]):
                    return position
        raise ConfigError(
            f"tool call {wanted.get('id')!r} ({wanted['name']}) is in no AI message of the state's "
            f"{self.messages_key!r}; durable tool calls need the message that made them (messages_key=...)"
        )


def call_key(run_id: str, config: Mapping[str, Any], position: int, call_id: str) -> str:
    """The call's idempotency key by occurrence: the thread's run, the graph step, the task's
    namespace (its task id), its position in the AI message and the provider's id."""
    metadata = config.get("metadata") or {}
    step = metadata.get("langgraph_step")
    namespace = (config.get("configurable") or {}).get("checkpoint_ns", "")
    if not isinstance(step, int):
        raise ConfigError("durable tool calls run inside a LangGraph graph (no langgraph_step in the task's config)")
    return occurrence_key(run_id, step, position, f"{namespace}\x00{call_id}")


def _message(call: ToolCall, answer: _effects.Answered) -> ToolMessage:
    return ToolMessage(
        content=answer.content, tool_call_id=call.id, name=call.name, status="error" if answer.is_error else "success"
    )


def _outcome(result: Any) -> tuple[str, bool]:
    """What to record of the tool's result: its message's text and whether it is an error."""
    if isinstance(result, ToolMessage):
        content = result.content if isinstance(result.content, str) else json.dumps(result.content)
        return content, result.status == "error"
    return json.dumps(result, default=str), False


def durable_tool_node(
    tools: list[Any],
    store: Store,
    *,
    effects: Mapping[str, Effect] | None = None,
    probes: Mapping[str, Probe] | None = None,
    **tool_node_options: Any,
) -> Any:
    """A LangGraph ``ToolNode`` over ``tools`` whose calls go through the effect ledger
    (``DurableToolCalls``); compile the graph with ``UnbrokenSaver(store)``."""
    from langgraph.prebuilt import ToolNode

    names = {getattr(tool, "name", getattr(tool, "__name__", "")) for tool in tools}
    for option, keys in (("effects", effects or {}), ("probes", probes or {})):
        unknown = sorted(set(keys) - names)
        if unknown:
            raise ConfigError(f"{option} names {', '.join(unknown)}, which are not among the tools")
    calls = DurableToolCalls(
        store, effects=effects, probes=probes, messages_key=tool_node_options.get("messages_key", "messages")
    )
    return ToolNode(tools, wrap_tool_call=calls, awrap_tool_call=calls.awrap, **tool_node_options)
