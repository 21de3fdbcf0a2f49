"""``OpenAIResponsesModel``: the OpenAI Responses API through the official ``openai`` SDK.

State is kept on the client side: every request carries the whole history as ``input`` with
``store=False`` (never ``previous_response_id``), so a resumed run needs nothing from OpenAI's
servers. The history holds each output item exactly as the HTTP body carried it (reasoning items
with their ``encrypted_content``, messages, calls, server-tool items, unknown item types).

Because nothing is stored server-side, items are sent back without their server ``id`` and a
reasoning item without ``encrypted_content`` is left out of the request (it could only be
looked up by id). ``include=["reasoning.encrypted_content"]`` is asked for by default so
reasoning does carry over. The history itself is never changed.

Each tool result is a ``function_call_output`` item paired with its call by ``call_id``; a
failure is said in its text. Arguments that are not a JSON object are answered with an error,
never executed; an ``incomplete`` answer finishes the run with the text it has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model import ModelTurn, ToolSpec
from ..state import JSONValue
from . import _client
from . import openai_format as fmt
from ._base import SDKModel

log = logging.getLogger("unbroken")


class OpenAIResponsesModel(SDKModel):
    """Drive a run with the Responses API. ``client`` is an ``openai.OpenAI`` (``Agent.run``, and
    in a worker thread ``Agent.arun``) or an ``openai.AsyncOpenAI`` (``Agent.arun`` only). The
    agent's ``system`` prompt is sent as ``instructions``. ``request_options`` go to
    ``responses.create`` as given (``reasoning``, ``max_output_tokens``, ...)."""

    provider = fmt.RESPONSES
    history_format = fmt.RESPONSES_HISTORY
    adapter_name = "OpenAIResponsesModel"

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        encrypted_reasoning: bool = True,
        request_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.encrypted_reasoning = encrypted_reasoning
        self.request_options = dict(request_options or {})

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel(model={self.model!r})"

    def request(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> dict[str, Any]:
        """The keyword arguments of ``responses.create`` for this history (validated first)."""
        _client.check_answered(fmt.responses_dangling_call_ids(messages), "OpenAIResponsesModel")
        sent = [item for item in map(fmt.stateless, messages) if item is not None]
        request: dict[str, Any] = {"model": self.model, "input": sent, "store": False}
        if system:
            request["instructions"] = system
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.input_schema,
                    "strict": False,
                }
                for spec in tools
            ]
        if self.encrypted_reasoning:
            request["include"] = ["reasoning.encrypted_content"]
        request.update(self.request_options)
        return request

    def _create(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self.client.responses.with_raw_response.create
        return create

    def to_turn(self, response: Mapping[str, Any]) -> ModelTurn:
        """A Responses API body (JSON) as a ``ModelTurn``; every output item is kept whole."""
        output = response.get("output")
        if not isinstance(output, list):
            raise ValueError(f"the response has no output list (status {response.get('status')!r})")
        status = response.get("status")
        error = response.get("error")
        if status == "failed":
            raise ValueError(f"the response failed: {error!r}")
        usage = _client.usage_of(response)
        calls = fmt.responses_tool_calls(output)
        stop_reason = status if isinstance(status, str) else None
        if status == "incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, Mapping) else None
            stop_reason = str(reason or status)
            log.warning("OpenAI response incomplete: %r", reason)
        return ModelTurn(
            messages=list(output),
            tool_calls=calls,
            usage=usage,
            tokens=fmt.responses_tokens(usage),
            stop_reason=stop_reason,
            text=fmt.responses_text(output),
            done=not calls,
        )
