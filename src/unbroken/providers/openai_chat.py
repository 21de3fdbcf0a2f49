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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model import ModelTurn, ProposedCall, ToolSpec
from ..state import JSONValue
from . import _client
from . import openai_format as fmt
from ._base import SDKModel

log = logging.getLogger("unbroken")


class OpenAIChatModel(SDKModel):
    """Drive a run with Chat Completions. ``client`` is an ``openai.OpenAI`` (``Agent.run``, and
    in a worker thread ``Agent.arun``) or an ``openai.AsyncOpenAI`` (``Agent.arun`` only).
    The agent's ``system`` prompt is sent as the first message with ``system_role`` (``"system"``
    or ``"developer"``); it is not stored in the history. ``request_options`` go to
    ``chat.completions.create`` as given (``max_completion_tokens``, ``reasoning_effort``, ...)."""

    provider = fmt.CHAT
    history_format = fmt.CHAT_HISTORY
    adapter_name = "OpenAIChatModel"

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

    def _create(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self.client.chat.completions.with_raw_response.create
        return create

    def to_turn(self, response: Mapping[str, Any]) -> ModelTurn:
        """A Chat Completions response body (JSON) as a ``ModelTurn``; the message is kept whole."""
        choices = response.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            raise ValueError("the response has no choices[0].message")
        finish_reason = choice.get("finish_reason") if isinstance(choice, Mapping) else None
        usage = _client.usage_of(response)
        calls: list[ProposedCall] = fmt.chat_tool_calls(message)
        if finish_reason == "length" and calls and calls[-1].error is None:
            calls[-1] = calls[-1].replace(error="the answer was cut off at the token limit inside this call")
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
