"""``OpenAIChatModel``: OpenAI Chat Completions through the official ``openai`` SDK.

The assistant message stored in the history is ``choices[0].message`` exactly as the HTTP body
carried it (``refusal``, ``annotations`` and fields this code does not know included). Each tool
result goes back as its own ``role: "tool"`` message; a failure is said in its text.

Bad output: ``arguments`` that are not a JSON object make a call that is answered with an error
and never executed. ``finish_reason="length"`` marks the last call of the turn the same way (its
arguments were cut off); without calls the run finishes with the text it has. A ``refusal``
finishes the run with the refusal as its output.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..model import ModelTurn, ProposedCall, ToolSpec
from ..state import JSONValue, ToolCall, ToolResult
from . import _client
from . import openai_format as fmt

log = logging.getLogger("unbroken")


class OpenAIChatModel:
    """Drive a run with Chat Completions. ``client`` is an ``openai.OpenAI`` (``Agent.run``, and
    in a worker thread ``Agent.arun``) or an ``openai.AsyncOpenAI`` (``Agent.arun`` only).
    The agent's ``system`` prompt is sent as the first message with ``system_role`` (``"system"``
    or ``"developer"``); it is not stored in the history. ``request_options`` go to
    ``chat.completions.create`` as given (``max_completion_tokens``, ``reasoning_effort``, ...)."""

    provider = fmt.CHAT

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        system_role: str = "system",
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.system_role = system_role
        self.request_options = dict(request_options or {})

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r})"

    def request(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for this history (validated first)."""
        _client.check_answered(fmt.chat_dangling_call_ids(messages), "OpenAIChatModel")
        sent: list[JSONValue] = [{"role": self.system_role, "content": system}] if system else []
        sent.extend(messages)
        request: dict[str, Any] = {"model": self.model, "messages": sent}
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {"name": spec.name, "description": spec.description, "parameters": spec.input_schema},
                }
                for spec in tools
            ]
        request.update(self.request_options)
        return request

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        create = self.client.chat.completions.with_raw_response.create
        return self.to_turn(_client.post(create, self.request(messages, tools, system), "OpenAIChatModel.complete"))

    async def acomplete(
        self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None
    ) -> ModelTurn:
        create = self.client.chat.completions.with_raw_response.create
        return self.to_turn(await _client.apost(create, self.request(messages, tools, system)))

    def to_turn(self, response: Mapping[str, Any]) -> ModelTurn:
        """A Chat Completions response body (JSON) as a ``ModelTurn``; the message is kept whole."""
        choices = response.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            raise ValueError("the response has no choices[0].message")
        finish_reason = choice.get("finish_reason") if isinstance(choice, Mapping) else None
        usage = response.get("usage")
        usage = dict(usage) if isinstance(usage, Mapping) else {}
        calls: list[ProposedCall] = fmt.chat_tool_calls(message)
        if finish_reason == "length" and calls and calls[-1].error is None:
            calls[-1] = replace(calls[-1], error="the answer was cut off at the token limit inside this call")
        if finish_reason not in (None, "stop", "tool_calls") or message.get("refusal"):
            log.warning("OpenAI chat answer finished with %r (refusal: %r)", finish_reason, message.get("refusal"))
        return ModelTurn(
            messages=[dict(message)],
            tool_calls=calls,
            usage=usage,
            tokens=fmt.chat_tokens(usage),
            stop_reason=finish_reason if isinstance(finish_reason, str) else None,
            text=fmt.chat_text(message),
            done=not calls,
        )

    def start_messages(self, task: str) -> list[JSONValue]:
        return fmt.start_messages(task)

    def tool_result_messages(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
        return fmt.chat_tool_result_messages(calls, results)

    def dangling_call_ids(self, messages: Sequence[JSONValue]) -> list[str]:
        return fmt.chat_dangling_call_ids(messages)

    def find_calls(self, messages: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
        return fmt.chat_find_calls(messages, call_ids)

    def turn_starts(self, messages: Sequence[JSONValue]) -> list[int]:
        return fmt.chat_turn_starts(messages)
