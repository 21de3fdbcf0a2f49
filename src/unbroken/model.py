"""What the runner needs from a model: the ``Model`` protocol and the ``ModelTurn`` it returns.

Providers (``unbroken.providers``) implement it for the Anthropic and OpenAI SDKs and for the
scripted test model. The runner never looks inside a message: the model turns its own
provider-shaped output into tool calls, and builds the provider-shaped tool results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ._plain import Frozen, Plain
from .state import JSONValue, ToolCall, ToolResult
from .usage import add_usage as add_usage  # (its home is usage.py; kept importable from here)


class ToolSpec(Frozen):
    """A tool as the model sees it."""

    __slots__ = ("description", "input_schema", "name")
    name: str
    description: str
    input_schema: dict[str, JSONValue]

    def __init__(self, name: str, description: str, input_schema: dict[str, JSONValue]) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "input_schema", input_schema)


class ProposedCall(Frozen):
    """A tool call extracted from the model's answer. ``error`` is set when the call cannot be
    executed as given (arguments that are not a JSON object, for instance)."""

    __slots__ = ("error", "id", "input", "name")
    id: str
    name: str
    input: dict[str, JSONValue]
    error: str | None

    def __init__(self, id: str, name: str, input: dict[str, JSONValue], error: str | None = None) -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "input", input)
        object.__setattr__(self, "error", error)


class ModelTurn(Plain):
    """One answer from the model.

    ``messages`` are appended to the history exactly as given (provider shape, unmodified).
    When ``tool_calls`` is empty and ``done`` is true, the run is complete with ``text``;
    when it is empty and ``done`` is false (``pause_turn``, a truncated answer), the loop
    calls the model again."""

    __slots__ = ("done", "messages", "stop_reason", "text", "tokens", "tool_calls", "usage")
    messages: list[JSONValue]
    tool_calls: list[ProposedCall]
    usage: dict[str, JSONValue]
    tokens: int
    stop_reason: str | None
    text: str | None
    done: bool

    def __init__(
        self,
        messages: list[JSONValue],
        tool_calls: list[ProposedCall] | None = None,
        usage: dict[str, JSONValue] | None = None,
        tokens: int = 0,
        stop_reason: str | None = None,
        text: str | None = None,
        done: bool = True,
    ) -> None:
        self.messages = messages
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.usage = {} if usage is None else usage
        self.tokens = tokens
        self.stop_reason = stop_reason
        self.text = text
        self.done = done


@runtime_checkable
class Model(Protocol):
    """A model the runner can drive. ``provider`` names the message format of the history.

    Optional capabilities are declared as their own protocols below, never sniffed: a model
    may also be a ``HistoryReader`` (``find_calls``, ``turn_starts``) and ``JSONMessages``
    (``messages_are_json = True``: every message comes from parsed JSON, as with the SDK
    adapters and ``ScriptedModel``; saves then skip re-checking each message)."""

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


@runtime_checkable
class HistoryReader(Protocol):
    """Optional capability of a ``Model``: reading its own history back. The engine uses
    ``find_calls`` to rebuild a call found unanswered in a history (repair), and compaction
    uses ``turn_starts`` to cut only between turns. The provider adapters and
    ``ScriptedModel`` have it; a model without it gets neither (checked with ``isinstance``)."""

    def find_calls(self, messages: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
        """The calls with these ids, read back from the assistant messages (in ``call_ids`` order)."""
        ...

    def turn_starts(self, messages: Sequence[JSONValue]) -> list[int]:
        """Indexes of the messages that start a turn (a cut there leaves no call unanswered)."""
        ...


@runtime_checkable
class JSONMessages(Protocol):
    """Optional capability of a ``Model``: ``messages_are_json`` true when it builds every
    message from parsed JSON, so saves skip re-checking each message (``codec.Encoder``)."""

    messages_are_json: bool


def messages_are_json(model: Model) -> bool:
    """Whether ``model`` declares (``JSONMessages``) that its messages are plain parsed JSON."""
    return isinstance(model, JSONMessages) and model.messages_are_json is True
