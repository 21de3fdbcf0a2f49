"""``AnthropicModel``: the Anthropic Messages API through the official ``anthropic`` SDK.

The assistant message stored in the history is ``{"role": "assistant", "content": <content>}``
with ``content`` exactly as the HTTP body carried it (thinking and redacted_thinking blocks
with their signatures, server-tool blocks, block types this code has never heard of).

Stop reasons:

* ``tool_use``: the calls are run; every result goes back in one user message.
* ``pause_turn`` (a server tool paused a long turn): the turn is saved and the API is called
  again with it appended, which lets the model continue (``ModelTurn.done`` is false).
* ``max_tokens``: a ``tool_use`` block cut off at the limit is answered with an ``is_error``
  result and never executed (the other calls of the turn run). Without tool calls the run
  finishes with the text it has, unless ``continue_on_max_tokens=True`` asks the model to go on.
* ``refusal``, ``end_turn``, ``stop_sequence`` and anything else without calls: the run finishes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model import ModelTurn, ToolSpec
from ..state import JSONValue
from . import _client
from . import anthropic_format as fmt
from ._base import SDKModel

log = logging.getLogger("unbroken")


class AnthropicModel(SDKModel):
    """Drive a run with Claude. ``client`` is an ``anthropic.Anthropic`` (for ``Agent.run``, and
    in a worker thread for ``Agent.arun``) or an ``anthropic.AsyncAnthropic`` (``Agent.arun``
    only). ``request_options`` are passed to ``messages.create`` as given (``temperature``,
    ``tool_choice``, ``metadata``, ``extra_headers``, ...)."""

    provider = fmt.PROVIDER
    history_format = fmt.HISTORY
    adapter_name = "AnthropicModel"

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        max_tokens: int = 4096,
        thinking: Mapping[str, JSONValue] | None = None,
        continue_on_max_tokens: bool = False,
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.thinking = dict(thinking) if thinking is not None else None
        self.continue_on_max_tokens = continue_on_max_tokens
        self.request_options = dict(request_options or {})

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, max_tokens={self.max_tokens})"

    # ------------------------------------------------------------------ requests

    def request(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for this history (validated first)."""
        _client.check_answered(fmt.dangling_call_ids(messages), "AnthropicModel")
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": list(messages)}
        if system:
            request["system"] = system
        if tools:
            request["tools"] = [
                {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema}
                for spec in tools
            ]
        if self.thinking is not None:
            request["thinking"] = self.thinking
        request.update(self.request_options)
        return request

    def _create(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self.client.messages.with_raw_response.create
        return create

    # ------------------------------------------------------------------ responses

    def to_turn(self, response: Mapping[str, Any]) -> ModelTurn:
        """A Messages API response body (JSON) as a ``ModelTurn``; the content is kept whole."""
        content = response.get("content")
        if not isinstance(content, list):
            raise ValueError(f"the response has no content list (type {response.get('type')!r})")
        stop_reason = response.get("stop_reason")
        usage = _client.usage_of(response)
        calls = fmt.tool_calls(content)
        last = content[-1] if content else None
        if (
            stop_reason == "max_tokens"
            and calls
            and isinstance(last, Mapping)
            and last.get("type") == "tool_use"
            and last.get("id") == calls[-1].id
        ):
            calls[-1] = calls[-1].replace(
                error="the answer was cut off at max_tokens inside this call, so its input may be incomplete",
            )
        text = fmt.text_of(content)
        if calls or stop_reason == "pause_turn":
            done = False
        elif stop_reason == "max_tokens":
            done = not self.continue_on_max_tokens
        else:
            done = True
        if stop_reason not in (None, "end_turn", "tool_use", "pause_turn", "stop_sequence"):
            log.warning("Anthropic answer stopped with %r", stop_reason)
        if stop_reason == "refusal" and not text:
            text = "(the model refused to answer)"
        return fmt.assistant_turn(
            content,
            calls,
            usage,
            stop_reason=stop_reason if isinstance(stop_reason, str) else None,
            text=text,
            done=done,
        )
