"""What every model adapter shares, so each one says only what differs.

``FormatModel`` answers the history half of the ``Model`` protocol from a ``HistoryFormat``.
``SDKModel`` adds ``complete`` and ``acomplete``: build the request, send it through the SDK's
raw-response ``create`` (sync, or async, or sync in a worker thread), read the body as a
``ModelTurn``. An adapter provides ``_create``, ``request`` and ``to_turn``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..model import ModelTurn, ProposedCall, ToolSpec
from ..state import JSONValue, ToolCall, ToolResult
from . import _client
from ._history import HistoryFormat


class FormatModel:
    """The history rules of a model, taken from its ``history_format``."""

    history_format: ClassVar[HistoryFormat]
    messages_are_json: ClassVar[bool] = True
    """Every message this model returns or builds comes from parsed JSON (see ``codec.Encoder``)."""

    def start_messages(self, task: str) -> list[JSONValue]:
        return self.history_format.start_messages(task)

    def tool_result_messages(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
        return self.history_format.tool_result_messages(calls, results)

    def dangling_call_ids(self, messages: Sequence[JSONValue]) -> list[str]:
        return self.history_format.dangling_call_ids(messages)

    def find_calls(self, messages: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
        return self.history_format.find_calls(messages, call_ids)

    def turn_starts(self, messages: Sequence[JSONValue]) -> list[int]:
        return self.history_format.turn_starts(messages)


class SDKModel(FormatModel):
    """A model behind an official SDK client. ``adapter_name`` names it in error messages."""

    adapter_name: ClassVar[str]
    client: Any

    def _create(self) -> Callable[..., Any]:
        """The client's raw-response ``create`` method (``...with_raw_response.create``)."""
        raise NotImplementedError

    def request(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> dict[str, Any]:
        """The keyword arguments of ``create`` for this history (validated first)."""
        raise NotImplementedError

    def to_turn(self, response: Mapping[str, Any]) -> ModelTurn:
        """The provider's response body (JSON) as a ``ModelTurn``."""
        raise NotImplementedError

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        create = self._create()
        request = self.request(messages, tools, system)
        return self.to_turn(_client.post(create, request, f"{self.adapter_name}.complete"))

    async def acomplete(
        self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None
    ) -> ModelTurn:
        create = self._create()
        return self.to_turn(await _client.apost(create, self.request(messages, tools, system)))
