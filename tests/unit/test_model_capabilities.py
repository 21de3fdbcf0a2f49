"""A model's optional capabilities are declared protocols (``HistoryReader``, ``JSONMessages``),
checked with ``isinstance``; a model without them still runs."""

from __future__ import annotations

from collections.abc import Sequence

from unbroken import Agent, ScriptedModel, Store
from unbroken.model import HistoryReader, JSONMessages, Model, ModelTurn, ToolSpec, messages_are_json
from unbroken.providers import anthropic_format as fmt
from unbroken.state import JSONValue, ToolCall, ToolResult


class BareModel:
    """Only what ``Model`` requires: no history reading, no JSON promise."""

    provider = fmt.PROVIDER

    def __init__(self) -> None:
        self.inner = ScriptedModel([{"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}])

    def start_messages(self, task: str) -> list[JSONValue]:
        return self.inner.start_messages(task)

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        return self.inner.complete(messages, tools, system)

    async def acomplete(
        self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None
    ) -> ModelTurn:
        return self.inner.complete(messages, tools, system)

    def tool_result_messages(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
        return self.inner.tool_result_messages(calls, results)

    def dangling_call_ids(self, messages: Sequence[JSONValue]) -> list[str]:
        return self.inner.dangling_call_ids(messages)


def test_the_scripted_model_declares_both_capabilities() -> None:
    model = ScriptedModel([])
    assert isinstance(model, HistoryReader) and isinstance(model, JSONMessages) and messages_are_json(model)


def test_a_model_with_only_the_required_methods_has_neither_capability() -> None:
    model = BareModel()
    assert isinstance(model, Model)
    assert not isinstance(model, HistoryReader) and not messages_are_json(model)


def test_a_model_without_capabilities_still_runs(sqlite_store: Store) -> None:
    result = Agent(BareModel(), store=sqlite_store).run("say ok", run_id="bare")
    assert (result.status, result.output) == ("completed", "ok")
