"""What the runner needs from a model: the ``Model`` protocol and the ``ModelTurn`` it returns.

Providers (``unbroken.providers``) implement it for the Anthropic and OpenAI SDKs and for the
scripted test model. The runner never looks inside a message: the model turns its own
provider-shaped output into tool calls, and builds the provider-shaped tool results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .state import JSONValue, ToolCall, ToolResult


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    input_schema: dict[str, JSONValue]


@dataclass(frozen=True)
class ProposedCall:
    """A tool call extracted from the model's answer. ``error`` is set when the call cannot be
    executed as given (arguments that are not a JSON object, for instance)."""

    id: str
    name: str
    input: dict[str, JSONValue]
    error: str | None = None


@dataclass
class ModelTurn:
    """One answer from the model.

    ``messages`` are appended to the history exactly as given (provider shape, unmodified).
    When ``tool_calls`` is empty and ``done`` is true, the run is complete with ``text``;
    when it is empty and ``done`` is false (``pause_turn``, a truncated answer), the loop
    calls the model again."""

    messages: list[JSONValue]
    tool_calls: list[ProposedCall] = field(default_factory=list)
    usage: dict[str, JSONValue] = field(default_factory=dict)
    tokens: int = 0
    stop_reason: str | None = None
    text: str | None = None
    done: bool = True


@runtime_checkable
class Model(Protocol):
    """A model the runner can drive. ``provider`` names the message format of the history.

    A model may also set ``messages_are_json = True`` when it builds every message from parsed
    JSON (as the SDK adapters and ``ScriptedModel`` do); saves then skip re-checking each
    message for tuples and non-str keys. Without it, every new message is checked."""

    provider: str

    def start_messages(self, task: str) -> list[JSONValue]:
        """The history of a new run: the task as the first user message."""
        ...

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        """Ask the model for its next turn. May raise anything; the runner stays at its last save."""
        ...

    async def acomplete(
        self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None
    ) -> ModelTurn:
        """Async twin of ``complete``."""
        ...

    def tool_result_messages(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
        """The provider-shaped message(s) answering ``calls`` with ``results`` (same order)."""
        ...

    def dangling_call_ids(self, messages: Sequence[JSONValue]) -> list[str]:
        """Ids of tool calls in ``messages`` that have no result (the provider would reject them)."""
        ...


def add_usage(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """Sum two provider usage objects key by key (nested dicts too); keeps every key."""
    merged = dict(total)
    for key, value in usage.items():
        if isinstance(value, bool) or value is None:
            merged.setdefault(key, value)
        elif isinstance(value, (int, float)):
            previous = merged.get(key)
            merged[key] = (
                previous if isinstance(previous, (int, float)) and not isinstance(previous, bool) else 0
            ) + value
        elif isinstance(value, dict):
            previous = merged.get(key)
            merged[key] = add_usage(previous if isinstance(previous, dict) else {}, value)
        else:
            merged[key] = value
    return merged
